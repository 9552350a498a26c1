package finalizerwatch

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gcprobe/probe/internal/testkit"
)

// Cleanup.Stop on a cleanup that the runtime has already queued does not
// stop it; the ledger's cleared count must not rise for it and fall back
// when it runs (issue 26, item 2): exported as a Prometheus counter, that
// reads as a reset. The runtime's cleanup goroutine is held by a blocking
// cleanup while the watched one waits in the queue, so that the test
// reads the ledger between the Stop and the run.
func TestStopOfAQueuedCleanupNeverUncounts(t *testing.T) {
	w := newWatcher(t)
	release := make(chan struct{})
	blocking := make(chan struct{})
	var released atomic.Bool
	t.Cleanup(func() {
		if released.CompareAndSwap(false, true) {
			close(release)
		}
	})
	runtime.AddCleanup(&big{}, func(int) { close(blocking); <-release }, 0)
	testkit.AwaitGC(t, 20*time.Second, "the blocking cleanup", func() bool {
		select {
		case <-blocking:
			return true
		default:
			return false
		}
	})

	var ran atomic.Int64
	c := func() Cleanup {
		return AddCleanupTo(w, &big{}, func(int) { ran.Add(1) }, 0)
	}()
	runtime.GC() // the object is dead: its cleanup is queued, behind the blocking one
	c.Stop()     // too late: it stays queued
	if ran.Load() != 0 {
		t.Skip("the watched cleanup ran on another cleanup goroutine before the Stop")
	}
	var last uint64
	check := func(when string) Totals {
		t.Helper()
		tot := w.totals(KindCleanup)
		if tot.Cleared < last {
			t.Fatalf("%s: cleared went down from %d to %d", when, last, tot.Cleared)
		}
		last = tot.Cleared
		if tot.RanAfterStop != tot.Executed {
			t.Fatalf("%s: %d ran after Stop, %d executed: this registration's only run comes after its Stop", when, tot.RanAfterStop, tot.Executed)
		}
		if tot.Registered != tot.Executed+tot.Cleared+tot.Outstanding {
			t.Fatalf("%s: %+v does not add up", when, tot)
		}
		return tot
	}
	for range 20 { // the Stop must not be settled as cleared while the cleanup waits in the queue
		check("queued, stopped")
		settleStops(false)
		time.Sleep(time.Millisecond) // give a wrong settling its chance; nothing to wait for
	}
	released.Store(true)
	close(release)
	testkit.AwaitGC(t, 20*time.Second, "the stopped cleanup's run", func() bool { return ran.Load() == 1 })
	drain(t)
	if tot := check("ran"); tot.Executed != 1 || tot.Cleared != 0 || tot.Outstanding != 0 || tot.RanAfterStop != 1 {
		t.Fatalf("after the run: %+v, want executed 1 (ran after Stop), cleared 0, outstanding 0", tot)
	}
}

// A Stop that removes the cleanup is counted cleared once settled, and the
// registration is no longer a suspect from the Stop on.
func TestStopSettlesAsCleared(t *testing.T) {
	w := newWatcher(t)
	o := &big{}
	var ran atomic.Int64
	const n = 100
	for range n {
		AddCleanupTo(w, o, func(int) { ran.Add(1) }, 0).Stop()
	}
	testkit.AwaitGC(t, 20*time.Second, "the Stops settled", func() bool { return w.totals(KindCleanup).Cleared == n })
	runtime.KeepAlive(o)
	if tot := w.totals(KindCleanup); tot.Outstanding != 0 || tot.Executed != 0 || stops.len() != 0 {
		t.Fatalf("%+v with %d Stops waiting; want %d cleared, nothing else", tot, stops.len(), n)
	}
	o = nil
	drain(t)
	if ran.Load() != 0 {
		t.Fatalf("%d stopped cleanups ran", ran.Load())
	}
}
