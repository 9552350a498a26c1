package heapprofile_test

import (
	"fmt"
	"runtime"

	"github.com/gcprobe/probe/heapprofile"
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
