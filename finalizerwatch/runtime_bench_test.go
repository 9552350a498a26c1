package finalizerwatch

import (
	"context"
	"os"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/gcprobe/probe/stackcapture"
)

// The runtime build mode's cost, measured by running these benchmarks
// twice: in a stock build, and with the flag finalizercheck -runtime
// prints, where they attach Default to the runtime (bench/runtime.sh does
// both and prints the ratios). The names are the same in both builds so
// that the two runs compare row by row.

// attachForBench attaches Default in the runtime build mode; in a stock
// build it does nothing.
func attachForBench(b *testing.B) {
	if !RuntimeMode() {
		return
	}
	detach, err := Default.AttachRuntime()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(detach)
}

type rtBenchObj struct{ _ [16]byte }

func rtBenchFinalizer(*rtBenchObj) {}

// BenchmarkRuntimeModeSetClear is a raw runtime.SetFinalizer set and
// clear on one object: with the runtime mode attached, the hooks' whole
// cost on the registering side.
func BenchmarkRuntimeModeSetClear(b *testing.B) {
	attachForBench(b)
	o := new(rtBenchObj)
	b.ReportAllocs()
	for b.Loop() {
		runtime.SetFinalizer(o, rtBenchFinalizer)
		runtime.SetFinalizer(o, nil)
	}
	runtime.KeepAlive(o)
}

// BenchmarkRuntimeModeAddStop is a raw runtime.AddCleanup and Stop.
func BenchmarkRuntimeModeAddStop(b *testing.B) {
	attachForBench(b)
	o := new(rtBenchObj)
	b.ReportAllocs()
	for b.Loop() {
		runtime.AddCleanup(o, func(int) {}, 0).Stop()
	}
	runtime.KeepAlive(o)
}

// BenchmarkRuntimeModeOpenClose is os.Open and Close of one file: a
// registration through the standard library, counted at this line.
func BenchmarkRuntimeModeOpenClose(b *testing.B) {
	attachForBench(b)
	name := os.Args[0]
	b.ReportAllocs()
	for b.Loop() {
		f, err := os.Open(name)
		if err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
}

// BenchmarkRuntimeModeOpenCloseDeep is BenchmarkRuntimeModeOpenClose 24
// frames below the benchmark, as deep as an operator's reconcile opens
// files: the hook walks up to the user's line, and no further for a line
// it has seen (rtIndirectSite).
func BenchmarkRuntimeModeOpenCloseDeep(b *testing.B) {
	attachForBench(b)
	name := os.Args[0]
	b.ReportAllocs()
	atDepth(24, func() {
		for b.Loop() {
			f, err := os.Open(name)
			if err != nil {
				b.Fatal(err)
			}
			f.Close()
		}
	})
}

// BenchmarkRuntimeModeGoUser is a go statement of the program's, whose
// goroutine returns at once: in the runtime mode, the go statement's hook
// finds the statement's class in its table and returns it as the origin.
// The goroutines are waited for every goBatch statements: unbounded, the
// loop makes goroutines faster than the other P runs them, thousands wait
// runnable, and the time per statement follows how deep that backlog
// grows (fresh stacks once the free list is empty), from one run to the
// next of one binary, by more than twice.
func BenchmarkRuntimeModeGoUser(b *testing.B) {
	attachForBench(b)
	var wg sync.WaitGroup
	n := 0
	for b.Loop() {
		wg.Add(1)
		go wg.Done()
		if n++; n%goBatch == 0 {
			wg.Wait()
		}
	}
	wg.Wait()
}

// goBatch is how many goroutines the go statement benchmarks start
// before they wait for them.
const goBatch = 64

// BenchmarkRuntimeModeGoStd is a go statement of the standard library's,
// made on a goroutine of the program's: context.AfterFunc on a context
// already done starts its function's goroutine at once. In the runtime
// mode the hook walks the stack above the go statement for the program's
// frame.
func BenchmarkRuntimeModeGoStd(b *testing.B) {
	attachForBench(b)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var wg sync.WaitGroup
	n := 0
	for b.Loop() {
		wg.Add(1)
		context.AfterFunc(ctx, wg.Done)
		if n++; n%goBatch == 0 {
			wg.Wait()
		}
	}
	wg.Wait()
}

// BenchmarkGoOriginHook is the go statement's hook alone, as the runtime
// mode calls it from newproc, for a go statement of the program's (a
// table load) and of the standard library's (a walk of this stack).
func BenchmarkGoOriginHook(b *testing.B) {
	for _, bb := range []struct {
		name string
		pc   uintptr
	}{
		{"program", stackcapture.CallerPC(0)},
		{"std", reflect.ValueOf(strings.ToUpper).Pointer() + 1},
	} {
		b.Run(bb.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				rtGoOrigin(bb.pc, 0)
			}
		})
	}
}

// BenchmarkSettle is the move of the counts on the P into the ledger
// that every Read makes first in the runtime build mode (rtpcounts.go):
// a forEachP over the Ps, with one table's count to move. (Not a
// BenchmarkRuntimeMode: a stock build has nothing to compare it with.)
func BenchmarkSettle(b *testing.B) {
	if !RuntimeMode() {
		b.Skip("not built in the runtime build mode")
	}
	attachForBench(b)
	o := new(rtBenchObj)
	for b.Loop() {
		runtime.SetFinalizer(o, rtBenchFinalizer)
		runtime.SetFinalizer(o, nil)
		rtSettle()
	}
	runtime.KeepAlive(o)
}
