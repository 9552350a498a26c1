package heapprofile

// TEMPORARY: a copy of the declarations that branch heap adds to this
// package (stack signatures), so that the operator causes compile before
// it lands. Deleted once it does; nothing here matches any stack.

import "github.com/gcprobe/probe/stackcapture"

// Signature names a kind of allocation by the functions on its stacks.
type Signature struct {
	Name string
	// Frames are substrings of function names. A stack matches when, from
	// the allocation outward, it has a frame whose function contains
	// Frames[0], then further out one containing Frames[1], and so on.
	Frames []string
}

// WithSignatures makes the profiler sum the stacks that match each of sigs.
func WithSignatures(sigs ...Signature) Option {
	return func(*config) error { return nil }
}

// SignatureStat is what the stacks matching one Signature allocated.
type SignatureStat struct {
	Name                string
	AllocBytes          int64
	AllocBytesPerSecond float64
	InUseBytes          int64
	AllocShare          float64
	InUseShare          float64
	Site                stackcapture.Frame
}

// snapshotSignatures stands for Snapshot.Signatures until it exists.
func snapshotSignatures(*Snapshot) []SignatureStat { return nil }
