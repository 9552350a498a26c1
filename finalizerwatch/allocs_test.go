package finalizerwatch

import (
	"math"
	"runtime"
	"runtime/metrics"
	"sync/atomic"
	"testing"
	"time"
)

// The allocation pins of the registration and run paths. Each count is
// what the path makes today, pinned with == so that one more allocation
// fails here, and so does one fewer (then lower the pin). The counts are
// the same under -race (checked with go1.26), so the tests run there too.
//
// What allocates:
//   - SetFinalizer set+clear on a live object at a known site: nothing,
//     as runtime.SetFinalizer (its special record is not a heap object);
//     one, the interface the table keeps, where the finalizer is called
//     through reflection (one with results, such as a Close method's
//     value; see finFunc), whose runs allocate anyway.
//   - SetFinalizer set+clear with a finalizer that is a closure on the
//     heap: one, the closure of the watcher's that the runtime holds so
//     that a direct clear lets go of the user's (see heldFinalizer).
//   - AddCleanup: the runtime's two (runtime.AddCleanup moves its arg to
//     the heap and allocates the closure that calls cleanup(arg)), plus
//     the watcher's cleanupRec, the argument the runtime holds, whatever
//     the type of the user's arg.
const (
	pinSetClear        = 0
	pinSetClearReflect = 1
	pinSetClearClosure = 1
	pinAddCleanupStop  = 3
	// pinAddCleanupOverRaw is what AddCleanup makes beyond
	// runtime.AddCleanup: the cleanupRec.
	pinAddCleanupOverRaw = 1
)

// allocPinRuns is how many calls testing.AllocsPerRun averages over.
const allocPinRuns = 1000

type allocObj struct {
	p *int
	_ [3]uint64
}

func allocFinalizer(*allocObj) {}

func allocFinalizerResult(*allocObj) error { return nil }
func allocCleanupInt(int)                  {}
func allocCleanupPtr(*int)                 {}

func TestAllocPins(t *testing.T) {
	o := &allocObj{}
	arg := new(int)
	var n atomic.Int64
	closure := func(*allocObj) { n.Add(1) } // on the heap: it escapes into the finalizer
	rawAddStop := testing.AllocsPerRun(allocPinRuns, func() {
		runtime.AddCleanup(o, allocCleanupInt, 0).Stop()
	})
	for _, full := range []bool{false, true} {
		mode := "default"
		if full {
			mode = "full stacks"
		}
		w := newWatcher(t, WithFullStacks(full))
		// AllocsPerRun calls each function once before it counts: the
		// site's ledger entry and, with full stacks, the stack's are made
		// then, so what is counted is a registration at a known site (a
		// seen stack).
		for _, tt := range []struct {
			name string
			fn   func()
			want float64
		}{
			{"SetFinalizer set+clear", func() {
				w.SetFinalizer(o, allocFinalizer)
				w.SetFinalizer(o, nil)
			}, pinSetClear},
			{"SetFinalizer set+clear, a closure", func() {
				w.SetFinalizer(o, closure)
				w.SetFinalizer(o, nil)
			}, pinSetClearClosure},
			{"SetFinalizer set+clear, a finalizer with a result", func() {
				w.SetFinalizer(o, allocFinalizerResult)
				w.SetFinalizer(o, nil)
			}, pinSetClearReflect},
			{"AddCleanup+Stop, int arg", func() {
				AddCleanupTo(w, o, allocCleanupInt, 0).Stop()
			}, pinAddCleanupStop},
			// The cheap arg, a pointer (nothing to copy): the same count,
			// as the runtime is given the cleanupRec whatever the arg.
			{"AddCleanup+Stop, pointer arg", func() {
				AddCleanupTo(w, o, allocCleanupPtr, arg).Stop()
			}, pinAddCleanupStop},
			{"AddCleanup+Stop beyond the runtime's", func() {
				AddCleanupTo(w, o, allocCleanupInt, 0).Stop()
			}, rawAddStop + pinAddCleanupOverRaw},
		} {
			t.Run(tt.name+", "+mode, func(t *testing.T) {
				if got := testing.AllocsPerRun(allocPinRuns, tt.fn); got != tt.want {
					t.Errorf("%v allocations per call, want %v (runtime.AddCleanup+Stop: %v)", got, tt.want, rawAddStop)
				}
			})
		}
	}
	runtime.KeepAlive(o)
	runtime.KeepAlive(arg)
}

// runAllocSlack is how many allocations per object the watched run path
// may make beyond the runtime's. The run itself allocates nothing per
// object: measured at go1.26 the watcher adds about 0.007 per object (a
// sampled stack now and then, the GC-cycle sentinels). The count is not
// exact (the GC cycle allocates beside it), and the address table may
// shrink while a batch runs: a shard that the batch's takes left under an
// eighth full for two GC cycles is resized once, as it should be
// (TestObjMapShrinksAfterTheBurst), about one allocation for each of the
// 64 shards, 0.03 per object, which the slow finalizer runs of a
// race-detector build let happen in a run of the test now and then
// (measured: 0.026 beyond the runtime's). So the pin is a bound above
// both; one allocation per run would be 1.
const (
	runAllocBatch = 2000
	runAllocSlack = 0.05
)

// runCount counts the runs of countingFinalizer and signals done when
// the count reaches target.
var runCount struct {
	n, target atomic.Int64
	done      chan struct{}
}

func init() { runCount.done = make(chan struct{}, 1) }

func countingFinalizer(*allocObj) {
	if runCount.n.Add(1) == runCount.target.Load() {
		runCount.done <- struct{}{}
	}
}

// heapAllocs returns how many heap objects the process has allocated,
// without stopping the world.
func heapAllocs() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:objects"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// registerDropped registers n objects that are unreachable on return.
//
//go:noinline
func registerDropped(n int, register func(*allocObj)) {
	for range n {
		register(&allocObj{})
	}
}

// runAllocs returns the heap allocations per object made while a batch of
// objects registered with register is found unreachable and its
// finalizers run: from the first GC after registering to the last run.
// It waits on a channel, not by polling, so that the wait itself
// allocates next to nothing.
func runAllocs(t *testing.T, register func(*allocObj)) float64 {
	t.Helper()
	runCount.n.Store(0)
	runCount.target.Store(runAllocBatch)
	registerDropped(runAllocBatch, register)
	before := heapAllocs()
	runtime.GC()
	// If the GC did not find every object unreachable in one cycle (a
	// pointer left in a register), run another each second. Not
	// testkit.AwaitGC: the allocations counted include each cycle's.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	deadline := time.Now().Add(20 * time.Second)
	for waiting := true; waiting; {
		select {
		case <-runCount.done:
			waiting = false
		case <-tick.C:
			if time.Now().After(deadline) {
				t.Fatalf("after 20s, %d of %d finalizers ran", runCount.n.Load(), runAllocBatch)
			}
			runtime.GC()
		}
	}
	return float64(heapAllocs()-before) / runAllocBatch
}

// TestRunAllocPin: the watched finalizer's run allocates no more per object
// than the runtime's own (within runAllocSlack, see there). Not exact: the
// count includes what the GC cycle and the sentinels allocate.
func TestRunAllocPin(t *testing.T) {
	w := newWatcher(t)
	// The least of a few interleaved batches: what the process does beside
	// the test (a first GC cycle's work, a timer) only adds.
	raw, watched := math.Inf(1), math.Inf(1)
	for range 3 {
		raw = min(raw, runAllocs(t, func(o *allocObj) { runtime.SetFinalizer(o, countingFinalizer) }))
		watched = min(watched, runAllocs(t, func(o *allocObj) { w.SetFinalizer(o, countingFinalizer) }))
	}
	t.Logf("allocations per object while finalizers run: runtime %.4f, watcher %.4f", raw, watched)
	if watched > raw+runAllocSlack {
		t.Errorf("watched finalizer run: %.4f allocations per object, runtime %.4f: more than %v beyond it", watched, raw, runAllocSlack)
	}
}
