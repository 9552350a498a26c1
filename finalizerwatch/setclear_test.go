package finalizerwatch

import (
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gcprobe/probe/internal/testkit"
)

// raceSetClear sets a finalizer on o and clears it from two goroutines at
// once, as close together as the scheduler allows: both spin until the
// other is ready.
func raceSetClear(w *Watcher, o *big, fin func(*big)) {
	var ready atomic.Int32
	var wg sync.WaitGroup
	wg.Add(2)
	for _, f := range []func(*big){fin, nil} {
		go func() {
			defer wg.Done()
			ready.Add(1)
			for ready.Load() < 2 {
				runtime.Gosched()
			}
			if f == nil {
				w.SetFinalizer(o, nil)
			} else {
				w.SetFinalizer(o, f)
			}
		}()
	}
	wg.Wait()
}

// setClearHelperEnv makes the test binary, run again, race watched sets
// and clears of one object and then set again where the ledger says the
// finalizer was cleared.
const setClearHelperEnv = "GCPROBE_SETCLEAR_HELPER"

func TestSetClearHelperProcess(t *testing.T) {
	if os.Getenv(setClearHelperEnv) == "" {
		t.Skip("helper process only")
	}
	runtime.GOMAXPROCS(max(runtime.GOMAXPROCS(0), 2))
	w, _ := New()
	fin := func(*big) {}
	deadline := time.Now().Add(5 * time.Second)
	rounds, cleared := 0, 0
	for ; rounds < 20000 && time.Now().Before(deadline); rounds++ {
		o := &big{}
		before := w.totals(KindFinalizer).Cleared
		raceSetClear(w, o, fin)
		if w.totals(KindFinalizer).Cleared > before {
			// The ledger says the clear came last: o has no finalizer,
			// and setting one is what the runtime allows.
			cleared++
			w.SetFinalizer(o, fin)
		}
		w.SetFinalizer(o, nil)
	}
	fmt.Printf("survived %d rounds, %d cleared by the race\n", rounds, cleared)
}

// A watched set and a watched clear of one object, racing, reach the
// address table and the runtime in the same order (issue 26, item 5), so
// that the ledger says cleared exactly when the runtime holds no finalizer.
// Before, the clear could take the set's entry, counting it cleared, while
// the set's runtime.SetFinalizer came after the clear's: the runtime held
// the watcher's finalizer with no entry behind it, and the next set, which
// the ledger allowed, ended the program ("finalizer already set") within a
// few hundred rounds; the runtime alone never does, as its set and clear
// are each one step.
func TestSetRacingClearThenSetAgain(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the test binary")
	}
	code, out := testkit.RunTest(t, "TestSetClearHelperProcess", []string{setClearHelperEnv + "=1"}, "-test.v")
	first, _, _ := strings.Cut(out, "\n\n")
	if code != 0 || !strings.Contains(out, "survived") {
		t.Fatalf("exit %d:\n%s", code, first)
	}
	i := strings.Index(out, "survived")
	t.Log(strings.SplitN(out[i:], "\n", 2)[0])
}

// After racing sets and clears, every object dropped runs the user's
// finalizer exactly when its registration is outstanding in the ledger:
// the runtime never runs the watcher's finalizer with no entry behind it.
func TestSetRacingClearOnOneObject(t *testing.T) {
	const rounds = 2000
	w := newWatcher(t)
	var ran atomic.Int64
	fin := func(*big) { ran.Add(1) }
	orphans := orphanRuns.Load()
	for range rounds {
		raceSetClear(w, &big{}, fin)
	}
	drain(t)
	tot := w.totals(KindFinalizer)
	t.Logf("%d rounds: %+v; user finalizers ran %d", rounds, tot, ran.Load())
	if n := orphanRuns.Load() - orphans; n != 0 {
		t.Errorf("the runtime ran the watcher's finalizer %d times with no entry behind it (the ledger said cleared)", n)
	}
	if tot.Registered != rounds || tot.Outstanding != 0 || tot.Executed+tot.Cleared != rounds || tot.Executed != uint64(ran.Load()) {
		t.Errorf("ledger %+v after %d rounds, %d finalizers ran: want every round executed or cleared, executed = ran", tot, rounds, ran.Load())
	}
}

// liveAfterDrain returns the live heap once everything dropped before the
// call is collected and the callbacks it queued have run (see drain).
func liveAfterDrain(t *testing.T) uint64 {
	t.Helper()
	drain(t)
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// holdMiB is what each closure of the retention tests holds.
const holdMiB = 1 << 20

// A finalizer set through the watcher and cleared with runtime.SetFinalizer
// directly keeps nothing alive once its object is dropped, as with the
// runtime alone (issue 26, item 4): neither the user's closure and what it
// holds nor, if the closure reaches it, the object. Before, the address
// table's stale entry held the closure until the address was registered
// again: +1 MiB per object here, and objects reached from their closures
// were never freed.
func TestDirectClearKeepsNothingAlive(t *testing.T) {
	const n = 64
	w := newWatcher(t)
	for _, v := range []via{{}, {w: w}} {
		name := "runtime"
		if !v.raw() {
			name = "finalizerwatch"
		}
		t.Run(name, func(t *testing.T) {
			before := liveAfterDrain(t)
			var freed atomic.Int64
			func() {
				for range n {
					o := &big{}
					buf := make([]byte, holdMiB)
					// The closure holds 1 MiB and reaches its object.
					v.setFinalizer(o, func(*big) { _ = buf[0]; _ = o.buf })
					runtime.SetFinalizer(o, nil)
					runtime.AddCleanup(o, func(*atomic.Int64) { freed.Add(1) }, &freed)
				}
			}()
			// Not testkit.AwaitGC: a timeout is an Errorf below, and the heap check still runs.
			deadline := time.Now().Add(10 * time.Second)
			for freed.Load() < n && time.Now().Before(deadline) {
				runtime.GC()
				time.Sleep(time.Millisecond) // polling: the cleanups run on their own goroutine
			}
			grown := int64(liveAfterDrain(t)) - int64(before)
			t.Logf("%d of %d objects freed; live heap %+.1f MiB", freed.Load(), n, float64(grown)/(1<<20))
			if freed.Load() != n {
				t.Errorf("%d of %d objects freed in 10s", freed.Load(), n)
			}
			if grown > n*holdMiB/4 {
				t.Errorf("live heap grew by %.1f MiB, of the %d MiB the closures held", float64(grown)/(1<<20), n)
			}
		})
	}
	t.Run("closure without the object", func(t *testing.T) {
		before := liveAfterDrain(t)
		func() {
			for range n {
				o := &big{}
				buf := make([]byte, holdMiB)
				w.SetFinalizer(o, func(*big) { _ = buf[0] })
				runtime.SetFinalizer(o, nil)
			}
		}()
		if grown := int64(liveAfterDrain(t)) - int64(before); grown > n*holdMiB/4 {
			t.Errorf("live heap grew by %.1f MiB, of the %d MiB the closures held", float64(grown)/(1<<20), n)
		}
	})
}

// The runtime's static func values are told from closures on the heap.
func TestInImage(t *testing.T) {
	if imageLo == 0 {
		t.Fatal("the layout check failed: every finalizer is held by the runtime")
	}
	k := 3
	for _, tt := range []struct {
		name string
		give any
		want bool
	}{
		{"function", allocFinalizer, true},
		{"literal capturing nothing", func(*big) {}, true},
		{"method expression", (*textBuf).String, true},
		{"runtime function", runtime.GC, true},
		{"closure", func(*big) { k++ }, false},
		{"method value", (&textBuf{}).String, false},
	} {
		if got := inImage(dataOf(&tt.give)); got != tt.want {
			t.Errorf("%s: inImage = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// textBuf has a method, for its method expression and method values.
type textBuf struct{ b []byte }

func (s *textBuf) String() string { return string(s.b) }
