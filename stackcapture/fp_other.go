//go:build !amd64 && !arm64

package stackcapture

import "unsafe"

func getfp() unsafe.Pointer { return nil }

const haveFramePointers = false
