package heapprofile_test

import (
	"fmt"
	"runtime"

	"github.com/gcprobe/probe/heapprofile"
	"github.com/gcprobe/probe/stackcapture"
)

var sink []byte

// Reading the profile twice around some allocation names the line that
// allocated most in between.
func Example() {
	p, err := heapprofile.New()
	if err != nil {
		fmt.Println(err)
		return
	}
	p.Sample() // the baseline
	for range 8192 {
		sink = make([]byte, 8192)
	}
	runtime.GC() // the profile is published by GC cycles
	runtime.GC()
	p.Sample()
	top := p.Snapshot().Allocating
	fmt.Println(len(top) > 0 && top[0].Frame.Function == "github.com/gcprobe/probe/heapprofile_test.Example")
	// Output: true
}

// A site's path runs from its line down to where the allocation happened.
func ExampleSite_PathString() {
	s := heapprofile.Site{
		Frame: stackcapture.Frame{Function: "example.com/web.(*W).ReadFrom", File: "/src/web/responsewriter.go", Line: 50},
		Path:  []stackcapture.Frame{{Function: "io.Copy"}, {Function: "io.copyBuffer"}},
	}
	fmt.Println(s.PathString())
	// Output: responsewriter.go:50 → io.Copy → io.copyBuffer
}

// A snapshot that names no line says why.
func ExampleSnapshot_StatusText() {
	sn := heapprofile.Snapshot{Status: heapprofile.StatusOff}
	fmt.Println(sn.StatusText())
	sn = heapprofile.Snapshot{Status: heapprofile.StatusOverflow, Buckets: 70000, Bound: 65536, Ceiling: 65536}
	fmt.Println(sn.StatusText())
	// Output:
	// the heap profile is off (runtime.MemProfileRate = 0): no allocating line can be named
	// the heap profile has 70000 buckets, more than the ceiling of 65536 (4 × WithMaxBuckets): no allocating line can be named
}

//go:noinline
func decode(n int) {
	for range n / 8192 {
		sink = make([]byte, 8192)
	}
}

//go:noinline
func handle(n int) { decode(n) }

// A signature sums the allocations of a family of stacks: here decode
// called from handle, and names the line responsible.
func ExampleWithSignatures() {
	p, err := heapprofile.New(heapprofile.WithSignatures(heapprofile.Signature{
		Name:   "decoding requests",
		Frames: []string{"heapprofile_test.decode", "heapprofile_test.handle"},
	}))
	if err != nil {
		fmt.Println(err)
		return
	}
	p.Sample() // the baseline
	handle(64 << 20)
	runtime.GC() // the profile is published by GC cycles
	runtime.GC()
	p.Sample()
	sig := p.Snapshot().Signatures[0]
	fmt.Println(sig.Name, sig.AllocShare > 0, sig.Site.Function)
	// Output: decoding requests true github.com/gcprobe/probe/heapprofile_test.ExampleWithSignatures
}
