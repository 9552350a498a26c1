package finalizerwatch

import (
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gcprobe/probe/internal/testkit"
)

// The runtime build mode's tests run only in a binary built with the flag
// finalizercheck -runtime prints (scripts/runtime-mode-tests.sh runs them
// so, with -race); in a plain build they skip. cmd/finalizercheck's
// end-to-end tests cover the mode through the probe.

func needRuntimeMode(t *testing.T) {
	t.Helper()
	if !RuntimeMode() {
		t.Skip("not built in the runtime build mode (scripts/runtime-mode-tests.sh runs this test in it)")
	}
}

// rtTruth counts, per operation, what the test did and what ran: the
// ground truth the ledger is compared with.
type rtTruth struct {
	registered, cleared, ran atomic.Int64
}

type rtObj struct{ _ [24]byte }

// One function per registration site, so that the ledger's sites are told
// apart by function name.

//go:noinline
func rtOpDrop(tr *rtTruth) {
	o := new(rtObj)
	runtime.SetFinalizer(o, func(*rtObj) { tr.ran.Add(1) })
	tr.registered.Add(1)
}

//go:noinline
func rtOpSetClear(tr *rtTruth) {
	o := new(rtObj)
	runtime.SetFinalizer(o, func(*rtObj) { tr.ran.Add(1) })
	tr.registered.Add(1)
	runtime.SetFinalizer(o, nil)
	tr.cleared.Add(1)
}

//go:noinline
func rtOpReArm(tr *rtTruth) {
	// A finalizer that sets a new one on its object, once: the object
	// survives a cycle and its second finalizer is a second registration
	// at the same line.
	o := new(rtObj)
	var arm func(*rtObj)
	n := 0
	arm = func(o *rtObj) {
		tr.ran.Add(1)
		if n++; n < 2 {
			rtReArm(o, arm, tr)
		}
	}
	rtReArm(o, arm, tr)
}

//go:noinline
func rtReArm(o *rtObj, f func(*rtObj), tr *rtTruth) {
	runtime.SetFinalizer(o, f)
	tr.registered.Add(1)
}

//go:noinline
func rtOpCleanup(tr *rtTruth) {
	o := new(rtObj)
	runtime.AddCleanup(o, func(*rtTruth) { tr.ran.Add(1) }, tr)
	tr.registered.Add(1)
}

//go:noinline
func rtOpCleanupStop(tr *rtTruth) {
	o := new(rtObj)
	c := runtime.AddCleanup(o, func(*rtTruth) { tr.ran.Add(1) }, tr)
	tr.registered.Add(1)
	c.Stop()
	tr.cleared.Add(1)
	runtime.KeepAlive(o)
}

//go:noinline
func rtOpDropIn(tr *rtTruth) {
	// Through the drop-in: counted once, by the drop-in, at this line.
	o := new(rtObj)
	SetFinalizer(o, func(*rtObj) { tr.ran.Add(1) })
	tr.registered.Add(1)
}

//go:noinline
func rtOpOpenDrop(tr *rtTruth) {
	f, err := os.Open(os.Args[0])
	if err != nil {
		panic(err)
	}
	_ = f
	tr.registered.Add(1)
}

//go:noinline
func rtOpOpenClose(tr *rtTruth) {
	f, err := os.Open(os.Args[0])
	if err != nil {
		panic(err)
	}
	tr.registered.Add(1)
	f.Close()
	tr.cleared.Add(1)
}

// TestRuntimeModeRandomized runs a random mix of raw registrations, clears,
// Stops, re-arming finalizers, files opened and dropped or closed, and
// drop-in registrations, from several goroutines, and checks each site of
// the ledger against what the test did and what ran: registered, cleared
// and executed exactly, outstanding = registered - executed - cleared, the
// drop-in counted once, files dropped without Close counted as Dropped.
// Half the operations run 24 frames deeper, below the hooks' first walk.
func TestRuntimeModeRandomized(t *testing.T) {
	needRuntimeMode(t)
	detach, err := Default.AttachRuntime()
	if err != nil {
		t.Fatal(err)
	}
	defer detach()

	ops := []struct {
		name string // the site's function, as the ledger names it
		do   func(*rtTruth)
		kind Kind
		// runs: whether what it registers runs once dropped
		runs    bool
		dropped bool
	}{
		{"rtOpDrop", rtOpDrop, KindFinalizer, true, false},
		{"rtOpSetClear", rtOpSetClear, KindFinalizer, false, false},
		{"rtReArm", rtOpReArm, KindFinalizer, true, false},
		{"rtOpCleanup", rtOpCleanup, KindCleanup, true, false},
		{"rtOpCleanupStop", rtOpCleanupStop, KindCleanup, false, false},
		{"rtOpDropIn", rtOpDropIn, KindFinalizer, true, false},
		{"rtOpOpenDrop", rtOpOpenDrop, KindFinalizer, true, true},
		{"rtOpOpenClose", rtOpOpenClose, KindFinalizer, false, false},
	}
	truth := make([]rtTruth, len(ops))
	const goroutines, perG = 4, 3000
	done := make(chan struct{})
	for g := range goroutines {
		go func() {
			defer func() { done <- struct{}{} }()
			r := rand.New(rand.NewPCG(uint64(g), 7))
			for range perG {
				i := r.IntN(len(ops))
				// One line calls each op, at the goroutine's depth or
				// deeper than the hooks' first walk (rtShortWalk): the
				// same line, the same entry. (An op called from two
				// lines that opens a file would be a wrapper to the
				// ledger, counted at those lines: callers.go.)
				do := func() { ops[i].do(&truth[i]) }
				if r.IntN(2) == 0 {
					do()
				} else {
					atDepth(24, do)
				}
				if r.IntN(500) == 0 {
					runtime.GC()
				}
			}
		}()
	}
	for range goroutines {
		<-done
	}

	// Every dropped object runs in the end: drive GC cycles until what
	// ran, and what the ledger counts as executed, is all of it.
	var missing string
	complete := func() bool {
		runtime.GC()
		sites := rtSites()
		for i, op := range ops {
			tr := &truth[i]
			want := tr.registered.Load() - tr.cleared.Load()
			if !op.runs {
				want = 0
			}
			ran := tr.ran.Load()
			if op.dropped {
				ran = want // os.File's own finalizer: the test cannot count its runs
			}
			if ran != want || int64(sites[op.name].Executed) != want {
				missing = fmt.Sprintf("%s: want %d runs, ran %d, ledger executed %d (%+v)", op.name, want, tr.ran.Load(), sites[op.name].Executed, sites[op.name])
				return false
			}
		}
		return true
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log("last seen: " + missing)
		}
	})
	testkit.Poll(t, 60*time.Second, "every dropped object's finalizer or cleanup to run and be counted", complete)

	sites := rtSites()
	for i, op := range ops {
		tr := &truth[i]
		s, ok := sites[op.name]
		if !ok {
			t.Errorf("%s: no site in the ledger", op.name)
			continue
		}
		reg, clr, ran := uint64(tr.registered.Load()), uint64(tr.cleared.Load()), uint64(tr.ran.Load())
		if op.dropped {
			ran = reg - clr // every file dropped ran its finalizer (complete)
		}
		if s.Kind != op.kind || s.Registered != reg || s.Cleared != clr || s.Executed != ran ||
			s.Outstanding != s.Registered-s.Executed-s.Cleared || s.Outstanding != 0 {
			t.Errorf("%s: ledger %s registered %d cleared %d executed %d outstanding %d; did %d, cleared %d, ran %d",
				op.name, s.Kind, s.Registered, s.Cleared, s.Executed, s.Outstanding, reg, clr, ran)
		}
		wantDropped := uint64(0)
		if op.dropped {
			wantDropped = ran
		}
		if s.Dropped != wantDropped {
			t.Errorf("%s: Dropped %d, want %d", op.name, s.Dropped, wantDropped)
		}
	}
}
