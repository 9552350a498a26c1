//go:build !linux

package bench

import "time"

// processCPU and processRSS are read from Linux interfaces; elsewhere the
// benchmarks leave those figures out.
func processCPU() (time.Duration, bool) { return 0, false }
func processRSS() (uint64, bool)        { return 0, false }
