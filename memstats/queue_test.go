package memstats

import (
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/gcprobe/probe/internal/testkit"
)

// finObj carries a test finalizer. The pointer field keeps it out of the
// tiny allocator, where finalizers may never run.
type finObj struct {
	p *int
	_ [8]byte
}

// recorder collects a sampler's events.
type recorder struct {
	mu     sync.Mutex
	events []Event
}

func (r *recorder) record(e Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// saw reports whether detector fired (firing true) or resolved after firing.
func (r *recorder) saw(detector string, firing bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	fired := false
	for _, e := range r.events {
		if e.Detector != detector {
			continue
		}
		if e.Firing {
			fired = true
			if firing {
				return true
			}
		} else if fired && !firing {
			return true
		}
	}
	return false
}

// TestSlowFinalizersBackUpTheQueue: one burst of 2 000 finalizers of 8ms
// each (16s of work) backs the real runtime's finalizer queue up, nothing
// else registered. No GC cycle is forced after the one that queues them, so
// the sentinel measures nothing: the delay rises above 1s within 3s from
// the backlog alone, whatever order the runtime drains in; the queue drains
// slower than it filled, so it is stalled while over 1 000; once it has
// drained, the delay falls back to 0 without a GC cycle, and stays there.
// (queue_scenario_test.go runs the same burst, with and without churn, on
// the manual clock.)
func TestSlowFinalizersBackUpTheQueue(t *testing.T) {
	settle(t)
	s, err := New(WithInterval(50*time.Millisecond), WithoutDetector(DetectorForcedGC))
	if err != nil {
		t.Fatal(err)
	}
	var rec recorder
	s.Subscribe(rec.record)
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()

	const n = 2000
	for range n {
		runtime.SetFinalizer(&finObj{}, func(*finObj) { time.Sleep(8 * time.Millisecond) })
	}
	runtime.GC() // queues them all
	start := time.Now()

	testkit.Poll(t, 3*time.Second, "queue_latency to fire", func() bool {
		return rec.saw(DetectorQueueLatency, true)
	})
	sn := s.Snapshot()
	t.Logf("queue_latency fired after %v: length %d, latency %v (backlog %v, sentinel %v, drain %.0f/s)",
		time.Since(start).Round(time.Millisecond), sn.Finalizers.Length, sn.Finalizers.Latency,
		sn.Finalizers.Backlog, sn.Finalizers.SentinelLatency, sn.Finalizers.DrainPerSecond)

	testkit.Poll(t, 5*time.Second, "finalizer_queue_stalled to fire", func() bool {
		return rec.saw(DetectorQueueStalled, true)
	})
	t.Logf("finalizer_queue_stalled fired after %v", time.Since(start).Round(time.Millisecond))
	testkit.Poll(t, 20*time.Second, "finalizer_queue_stalled to resolve", func() bool {
		return rec.saw(DetectorQueueStalled, false)
	})
	t.Logf("finalizer_queue_stalled resolved after %v: length %d", time.Since(start).Round(time.Millisecond), s.Snapshot().Finalizers.Length)

	testkit.Poll(t, 40*time.Second, "the queue to drain and the detector to resolve", func() bool {
		sn := s.Snapshot()
		return sn.Finalizers.Length == 0 && rec.saw(DetectorQueueLatency, false)
	})
	sn = s.Snapshot()
	t.Logf("queue_latency resolved after %v: length %d, latency %v", time.Since(start).Round(time.Millisecond), sn.Finalizers.Length, sn.Finalizers.Latency)
	// Drained and left alone: the delay stays under the threshold.
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if sn := s.Snapshot(); sn.Finalizers.Latency >= DefaultQueueLatency {
			t.Fatalf("latency %v with a drained queue (length %d)", sn.Finalizers.Latency, sn.Finalizers.Length)
		}
	}
	if a := s.Active(nil); len(a) != 0 {
		t.Fatalf("detectors still firing: %+v", a)
	}
}

// TestBlockedFinalizerStallsTheQueue: a finalizer that blocks holds up the
// thousands queued behind it; the executed count stops and
// finalizer_queue_stalled fires, then resolves when it is released.
func TestBlockedFinalizerStallsTheQueue(t *testing.T) {
	settle(t)
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(func() { unblock(); settle(t) })

	s, err := New(WithInterval(50*time.Millisecond), WithQueueStalled(DefaultQueueStalledLength, 300*time.Millisecond),
		WithoutDetector(DetectorForcedGC))
	if err != nil {
		t.Fatal(err)
	}
	var rec recorder
	s.Subscribe(rec.record)
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()

	blocking := make(chan struct{})
	runtime.SetFinalizer(&finObj{}, func(*finObj) { close(blocking); <-release })
	testkit.AwaitGC(t, 10*time.Second, "the blocking finalizer to run", func() bool {
		select {
		case <-blocking:
			return true
		default:
			return false
		}
	})
	for range 1500 {
		runtime.SetFinalizer(&finObj{}, func(*finObj) {})
	}
	runtime.GC()

	testkit.Poll(t, 10*time.Second, "finalizer_queue_stalled to fire", func() bool {
		return rec.saw(DetectorQueueStalled, true)
	})
	if sn := s.Snapshot(); sn.Finalizers.Length <= DefaultQueueStalledLength {
		t.Fatalf("stalled with a queue of %d", sn.Finalizers.Length)
	}
	unblock()
	// The sentinels only move when cycles end.
	testkit.AwaitGC(t, 10*time.Second, "finalizer_queue_stalled to resolve", func() bool {
		return rec.saw(DetectorQueueStalled, false) && s.Snapshot().Finalizers.Length < 100
	})
}
