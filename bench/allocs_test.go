package bench

import (
	"runtime"
	"testing"

	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/memstats"
)

// allocRuns is how many calls testing.AllocsPerRun averages over.
const allocRuns = 100

// knownExtraCleanupAllocs is how many allocations AddCleanup through the
// watcher makes beyond the record it needs (see knownEscapes in
// escape_test.go); the test fails if the count changes either way.
const knownExtraCleanupAllocs = 0

// TestAllocs pins the allocation-free paths: a sampling round and a
// snapshot copy allocate nothing, setting and clearing a finalizer through
// the watcher allocates nothing the runtime does not, and adding a cleanup
// through it allocates one object more than the runtime (the record the
// runtime passes to the watcher's cleanup), plus knownExtraCleanupAllocs.
func TestAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	s, err := memstats.New()
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		s.Sample()
	}
	var sn memstats.Snapshot
	s.SnapshotInto(&sn)

	o := &microObj{}
	rawSetClear := testing.AllocsPerRun(allocRuns, func() {
		runtime.SetFinalizer(o, noopFinalizer)
		runtime.SetFinalizer(o, nil)
	})
	rawCleanups := make([]runtime.Cleanup, 0, allocRuns+1)
	rawAdd := testing.AllocsPerRun(allocRuns, func() {
		rawCleanups = append(rawCleanups, runtime.AddCleanup(o, noopCleanup, 0))
	})
	for _, c := range rawCleanups {
		c.Stop()
	}

	tests := []struct {
		name string
		fn   func()
		want float64
	}{
		{"memstats.Sampler.Sample", s.Sample, 0},
		{"memstats.Sampler.SnapshotInto", func() { s.SnapshotInto(&sn) }, 0},
	}
	for _, m := range watchModes[1:] {
		w := newWatcher(t, m.opts...)
		cs := make([]finalizerwatch.Cleanup, 0, allocRuns+1)
		t.Cleanup(func() {
			for _, c := range cs {
				c.Stop()
			}
		})
		tests = append(tests,
			struct {
				name string
				fn   func()
				want float64
			}{"SetFinalizer set+clear, " + m.name, func() {
				w.SetFinalizer(o, noopFinalizer)
				w.SetFinalizer(o, nil)
			}, rawSetClear},
			struct {
				name string
				fn   func()
				want float64
			}{"AddCleanup, " + m.name, func() {
				cs = append(cs, finalizerwatch.AddCleanupTo(w, o, noopCleanup, 0))
			}, rawAdd + 1 + knownExtraCleanupAllocs},
		)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := testing.AllocsPerRun(allocRuns, tt.fn); got != tt.want {
				t.Errorf("%v allocations per call, want %v (raw set+clear %v, raw AddCleanup %v)", got, tt.want, rawSetClear, rawAdd)
			}
		})
	}
	runtime.KeepAlive(o)
}
