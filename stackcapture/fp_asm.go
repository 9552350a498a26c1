//go:build amd64 || arm64

package stackcapture

import "unsafe"

// getfp is implemented in assembly.
func getfp() unsafe.Pointer

const haveFramePointers = true
