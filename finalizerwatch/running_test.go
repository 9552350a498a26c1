package finalizerwatch

import (
	"math"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gcprobe/probe/internal/testkit"
)

// A finalizer that blocks is named by Running, with how long it has run,
// while the finalizers queued behind it wait; once it returns, nothing is
// running.
func TestRunningNamesABlockingFinalizer(t *testing.T) {
	w := newWatcher(t)
	release := make(chan struct{})
	started := make(chan struct{})
	func() {
		w.SetFinalizer(&thing{}, func(*thing) { close(started); <-release }) // marker: blocking-finalizer
		for range 1000 {
			w.SetFinalizer(&thing{}, func(*thing) {}) // marker: queued-behind
		}
	}()
	line := testkit.MarkerLine(t, "running_test.go", "blocking-finalizer")
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()
	testkit.AwaitGC(t, 20*time.Second, "the blocking finalizer to start", func() bool {
		select {
		case <-started:
			return true
		default:
			return false
		}
	})
	// It runs, and keeps running: For grows.
	var first time.Duration
	testkit.Poll(t, 20*time.Second, "the running finalizer's For to grow", func() bool {
		r := w.runningNow()
		if len(r) != 1 || r[0].Site.Line != line || r[0].Kind != KindFinalizer {
			t.Fatalf("Running = %+v, want the finalizer on line %d", r, line)
		}
		if first == 0 {
			first = r[0].For
			return false
		}
		return r[0].For > first
	})
	close(release)
	released = true
	testkit.AwaitGC(t, 20*time.Second, "the blocked finalizer and those behind it to finish", func() bool {
		return len(w.runningNow()) == 0 && w.totals(KindFinalizer).Executed == 1001
	})
}

// Cleanups can run concurrently; a blocking one is named likewise.
func TestRunningNamesABlockingCleanup(t *testing.T) {
	w := newWatcher(t)
	release := make(chan struct{})
	defer close(release)
	AddCleanupTo(w, &thing{}, func(int) { <-release }, 0) // marker: blocking-cleanup
	line := testkit.MarkerLine(t, "running_test.go", "blocking-cleanup")
	testkit.AwaitGC(t, 20*time.Second, "the cleanup to run", func() bool {
		r := w.runningNow()
		return len(r) == 1 && r[0].Site.Line == line && r[0].Kind == KindCleanup
	})
}

func runningSiteA() {}
func runningSiteB() {}

// The slots that record running callbacks: a finalizer takes the one
// finalizer slot, cleanups up to 16 slots; one that finds them all taken is
// not recorded; Running lists each site once, with its longest running
// callback, and nothing once they end.
func TestRunningSlots(t *testing.T) {
	w := newWatcher(t)
	pcOf := func(f func()) uintptr { return reflect.ValueOf(f).Pointer() + 1 }
	a := w.siteFor(KindCleanup, pcOf(runningSiteA), 0)
	b := w.siteFor(KindCleanup, pcOf(runningSiteB), 0)
	f := w.siteFor(KindFinalizer, pcOf(runningSiteA), 0)
	now := monoNow()
	var slots []*atomic.Uint64
	// a's first cleanup and the finalizer started at clockBase, the rest
	// now: a is listed once, with its earliest start.
	slots = append(slots, w.begin(KindCleanup, a, 0), w.begin(KindCleanup, b, now))
	for range cleanupSlots - 2 {
		slots = append(slots, w.begin(KindCleanup, a, now))
	}
	if s := w.begin(KindCleanup, b, now); s != nil {
		t.Fatal("a 17th concurrent cleanup was given a slot")
	}
	fs := w.begin(KindFinalizer, f, 0)
	if s := w.begin(KindFinalizer, f, now); s != nil {
		t.Fatal("a second concurrent finalizer was given a slot")
	}
	r := w.runningNow()
	if len(r) != 3 {
		t.Fatalf("Running = %+v, want 3 entries", r)
	}
	since := time.Duration(now/int64(time.Millisecond)) * time.Millisecond
	byKind := map[Kind]RunningCallback{r[0].Kind: r[0], r[1].Kind: r[1]}
	if c := byKind[KindCleanup]; c.Site.Function != a.siteFrame().Function || c.For < since {
		t.Errorf("Running = %+v: want the cleanup at %s running for %v or more first", r, a.siteFrame().Function, since)
	}
	if c := byKind[KindFinalizer]; c.Site.Function != f.siteFrame().Function || c.For < since {
		t.Errorf("Running = %+v: want the finalizer running for %v or more first", r, since)
	}
	if r[2].Kind != KindCleanup || r[2].Site.Function != b.siteFrame().Function || r[2].For > r[1].For {
		t.Errorf("Running = %+v: want the cleanup at %s last", r, b.siteFrame().Function)
	}
	for _, s := range slots {
		end(s)
	}
	end(fs)
	if r := w.runningNow(); len(r) != 0 {
		t.Fatalf("Running after every callback ended = %+v", r)
	}
}

// TestTimedSpread: one run in DurationSampleRate is timed, within six
// standard deviations, and the draws are independent: a timed run is
// followed by a timed one as often as any run is.
func TestTimedSpread(t *testing.T) {
	const n = 1 << 16
	p := 1.0 / DurationSampleRate
	got, pairs, prev := 0.0, 0.0, false
	for range n {
		tm := timed()
		if tm {
			got++
			if prev {
				pairs++
			}
		}
		prev = tm
	}
	if sd := math.Sqrt(n * p * (1 - p)); math.Abs(got-n*p) > 6*sd {
		t.Errorf("%v of %d runs timed, want %.0f ± %.0f", got, n, n*p, 6*sd)
	}
	if sd := math.Sqrt(got * p * (1 - p)); math.Abs(pairs-got*p) > 6*sd+1 {
		t.Errorf("%v timed runs followed a timed run, of %v: want %.0f", pairs, got, got*p)
	}
}
