package heapprofile

import (
	"fmt"
	"runtime"
	"unsafe"
)

// Status says whether the latest read named the allocating lines, or why
// it could not.
type Status uint8

const (
	// StatusUnread: nothing read yet.
	StatusUnread Status = iota
	// StatusOK: the latest read read the profile; the lists are current.
	StatusOK
	// StatusOff: runtime.MemProfileRate is 0, so the runtime records no
	// allocation; the lists are empty.
	StatusOff
	// StatusOverflow: the profile holds more buckets than the bound, and
	// was not read; the lists are empty. The profiler raises its bound
	// for the next read, by doubling, up to BoundCeiling times
	// WithMaxBuckets; past that, every read is an overflow.
	StatusOverflow
)

// String returns "unread", "ok", "off" or "overflow".
func (s Status) String() string {
	switch s {
	case StatusUnread:
		return "unread"
	case StatusOK:
		return "ok"
	case StatusOff:
		return "off"
	case StatusOverflow:
		return "overflow"
	}
	return fmt.Sprintf("Status(%d)", uint8(s))
}

// BoundCeiling is how far the profiler raises its bucket bound on
// overflow: to at most BoundCeiling times WithMaxBuckets. Each bucket of
// the bound costs RecordBytes of memory once read, so the default bound
// (DefaultMaxBuckets, 4.5 MiB) may grow to 18 MiB.
const BoundCeiling = 4

// RecordBytes is the size of one runtime.MemProfileRecord: what a read
// holds per bucket of the profile.
const RecordBytes = int(unsafe.Sizeof(runtime.MemProfileRecord{}))

// StatusText says in a sentence why the snapshot names no allocating line,
// for a report to print instead of its sites; "" when Status is StatusOK.
// For instance "the heap profile is off (runtime.MemProfileRate = 0): no
// allocating line can be named".
func (s Snapshot) StatusText() string {
	switch s.Status {
	case StatusOK:
		return ""
	case StatusUnread:
		return "the heap profile has not been read yet"
	case StatusOff:
		return "the heap profile is off (runtime.MemProfileRate = 0): no allocating line can be named"
	case StatusOverflow:
		if s.Bound < s.Ceiling {
			return fmt.Sprintf("the heap profile has %d buckets, more than the bound of %d: this window was not read; "+
				"the bound is raised (up to %d) for the next read", s.Buckets, s.Bound, s.Ceiling)
		}
		return fmt.Sprintf("the heap profile has %d buckets, more than the ceiling of %d (%d × WithMaxBuckets): "+
			"no allocating line can be named", s.Buckets, s.Bound, BoundCeiling)
	}
	return s.Status.String()
}

// raise returns the bound after an overflow of n buckets: bound doubled
// until it holds n, at most ceiling.
func raise(bound, n, ceiling int) int {
	for bound < n && bound < ceiling {
		bound *= 2
	}
	return min(bound, ceiling)
}

// clearLists empties the snapshot's lists and figures: a read that could
// not be made must not leave an older window's lists looking current.
func (p *Profiler) clearLists() {
	sn := &p.snap
	sn.Window = 0
	sn.Allocating, sn.Growing = sn.Allocating[:0], sn.Growing[:0]
	sn.Signatures = sn.Signatures[:0]
	sn.TotalAllocBytes, sn.TotalInUseBytes = 0, 0
}
