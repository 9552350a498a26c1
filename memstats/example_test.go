package memstats_test

import (
	"fmt"
	"runtime"
	"time"

	"github.com/gcprobe/probe/memstats"
)

func Example() {
	s, err := memstats.New(memstats.WithInterval(time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	cancel := s.Subscribe(func(e memstats.Event) {
		// Called on the sampler's goroutine: keep it quick.
		fmt.Printf("%s firing=%v value=%g threshold=%g\n", e.Detector, e.Firing, e.Value, e.Threshold)
	})
	defer cancel()
	if err := s.Start(); err != nil {
		fmt.Println(err)
		return
	}
	defer s.Stop()

	runtime.GC()
	s.Sample() // or wait for the next interval or GC cycle

	snap := s.Snapshot()
	fmt.Println("GC cycles observed:", snap.Cycles > 0)
	fmt.Println("pauses in the history:", len(s.Pauses(nil)) > 0)
	fmt.Println("stopped the world for ReadMemStats:", snap.ReadMemStats.Calls)
	// Output:
	// GC cycles observed: true
	// pauses in the history: true
	// stopped the world for ReadMemStats: 0
}

func ExampleNew_invalidOption() {
	_, err := memstats.New(memstats.WithInterval(-time.Second))
	fmt.Println(err)
	// Output:
	// memstats: WithInterval: interval must be > 0, got -1s
}

func ExampleSampler_PausesSince() {
	s, err := memstats.New()
	if err != nil {
		fmt.Println(err)
		return
	}
	s.Sample()
	seen := s.Snapshot().Cycles

	runtime.GC()
	runtime.GC()
	s.Sample()

	// Only the cycles after the one already seen: an exporter keeps the
	// latest cycle it emitted and asks for what is new.
	var buf []memstats.Pause
	buf = s.PausesSince(seen, buf[:0])
	fmt.Println("new cycles:", len(buf) >= 2)
	// Output:
	// new cycles: true
}

func ExampleSampler_SnapshotInto() {
	s, err := memstats.New()
	if err != nil {
		fmt.Println(err)
		return
	}
	s.Sample()

	// Keep one Snapshot and refill it: after the first call its
	// histogram slices are reused and nothing is allocated.
	var snap memstats.Snapshot
	s.SnapshotInto(&snap)
	h := snap.PauseHistogram
	fmt.Println("buckets:", len(h.Bounds), "counts:", len(h.Counts))
	// Output:
	// buckets: 16 counts: 17
}

func ExampleRunning() {
	s, err := memstats.New(
		memstats.WithRunning(func() (memstats.Running, bool) {
			// The probe reads its finalizerwatch.Watcher here.
			return memstats.Running{Kind: "finalizer", Site: "main.(*conn).finalize main.go:42", For: 3 * time.Second}, true
		}),
		memstats.WithFinalizerBlocked(time.Second),
	)
	if err != nil {
		panic(err)
	}
	s.Sample()
	for _, e := range s.Active(nil) {
		if e.Detector == memstats.DetectorFinalizerBlocked {
			fmt.Printf("%s: %s running for %.0fs\n", e.Detector, e.Site, e.Value)
		}
	}
	// Output: finalizer_blocked: main.(*conn).finalize main.go:42 running for 3s
}
