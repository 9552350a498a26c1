package gcclock_test

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/internal/gcclock"
	"github.com/gcprobe/probe/internal/ledgertest"
	"github.com/gcprobe/probe/internal/testkit"
	"github.com/gcprobe/probe/memstats"
)

type obj struct {
	p *int
	_ [2]uint64
}

// TestWatcherAndSamplerShareTheClock: a finalizerwatch.Watcher and a
// memstats.Sampler, both running, start the process's chains once and
// count the very same ticks.
func TestWatcherAndSamplerShareTheClock(t *testing.T) {
	// No GC but the ones the test forces.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))

	starts := gcclock.Starts()
	w, err := finalizerwatch.New()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	o := &obj{}
	w.SetFinalizer(o, func(*obj) {}) // the first registration subscribes
	defer w.SetFinalizer(o, nil)
	s, err := memstats.New(memstats.WithInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	if got := gcclock.Starts() - starts; got != 1 {
		t.Fatalf("the chains started %d times for a watcher and a sampler, want once", got)
	}

	type reading struct{ clock, watcher, sampler [2]uint64 }
	read := func() reading {
		sf, sc := s.SentinelRuns()
		return reading{
			clock:   [2]uint64{gcclock.Ticks(gcclock.Finalizer), gcclock.Ticks(gcclock.Cleanup)},
			watcher: [2]uint64{ledgertest.Cycles(w, finalizerwatch.KindFinalizer), ledgertest.Cycles(w, finalizerwatch.KindCleanup)},
			sampler: [2]uint64{sf, sc},
		}
	}
	// With GC off and the chains just started, no tick is under way.
	r0 := read()
	// agree reports whether the watcher and the sampler have counted every
	// tick of the clock since r0 (they are told in the tick itself, one
	// after the other).
	agree := func(r reading) bool {
		for k := range 2 {
			dc := r.clock[k] - r0.clock[k]
			if r.watcher[k]-r0.watcher[k] != dc || r.sampler[k]-r0.sampler[k] != dc {
				return false
			}
		}
		return true
	}
	const cycles = 3
	r := r0
	for i := range cycles {
		runtime.GC()
		testkit.Poll(t, 20*time.Second, fmt.Sprintf("the clock's tick %d since %+v, counted by the watcher and the sampler", i+1, r0), func() bool {
			r = read()
			return r.clock[0]-r0.clock[0] > uint64(i) && r.clock[1]-r0.clock[1] > uint64(i) && agree(r)
		})
	}
	t.Logf("over %d forced cycles: %+v since %+v", cycles, r, r0)
}
