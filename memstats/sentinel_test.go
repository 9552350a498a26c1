package memstats

import (
	"runtime"
	"runtime/metrics"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gcprobe/probe/internal/testkit"
)

func TestQueuedBy(t *testing.T) {
	ends := func(ns ...int64) []time.Time {
		ts := make([]time.Time, len(ns))
		for i, n := range ns {
			ts[i] = time.Unix(0, n)
		}
		return ts
	}
	tests := []struct {
		name          string
		ends          []time.Time // most recent first
		armed, before int64
		want          int64
		cycles        int
	}{
		{"no cycles", nil, 10, 100, 0, 0},
		{"no cycle after arming", ends(9, 5), 10, 100, 0, 0},
		{"one cycle", ends(50, 5), 10, 100, 50, 1},
		{"two cycles: the second surely queued it", ends(70, 50, 5), 10, 100, 70, 2},
		{"three cycles", ends(90, 70, 50, 5), 10, 100, 70, 2},
		{"cycles after the run are ignored", ends(150, 120, 50, 5), 10, 100, 50, 1},
		{"cycle ending at arming is before it", ends(50, 10), 10, 100, 50, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, cycles := queuedBy(tt.ends, tt.armed, tt.before)
			if got != tt.want || cycles != tt.cycles {
				t.Fatalf("queuedBy = %d %d, want %d %d", got, cycles, tt.want, tt.cycles)
			}
		})
	}
}

func TestLatencyUpdate(t *testing.T) {
	ends := []time.Time{time.Unix(0, 300), time.Unix(0, 200), time.Unix(0, 100)}
	var l latencyState

	// The sentinel armed at 50 ran at 130: cycle 100 queued it.
	lat, overdue := l.update(trackView{armed: 50, ran: 130, pending: 130, runs: 1}, ends[2:], 150)
	if lat != 30 || overdue {
		t.Fatalf("finished run: %v %v, want 30ns", lat, overdue)
	}
	// The next one, armed at 130: one cycle (200) ended since, which may
	// have begun before 130, so it is not overdue yet.
	lat, overdue = l.update(trackView{armed: 50, ran: 130, pending: 130, runs: 1}, ends[1:], 250)
	if lat != 30 || overdue {
		t.Fatalf("waiting for one cycle: %v %v, want the previous 30ns", lat, overdue)
	}
	// A second cycle (300) ended: the sentinel is overdue since 300.
	lat, overdue = l.update(trackView{armed: 50, ran: 130, pending: 130, runs: 1}, ends, 1000)
	if lat != 700 || !overdue {
		t.Fatalf("overdue: %v %v, want 700ns", lat, overdue)
	}
	// It ran at 1100, queued (surely) by 300.
	lat, overdue = l.update(trackView{armed: 130, ran: 1100, pending: 1100, runs: 2}, ends, 1200)
	if lat != 800 || overdue {
		t.Fatalf("finished late run: %v %v, want 800ns", lat, overdue)
	}
	// Stopped chain: nothing pending.
	lat, overdue = l.update(trackView{armed: 130, ran: 1100, runs: 2}, ends, 5000)
	if lat != 800 || overdue {
		t.Fatalf("stopped: %v %v", lat, overdue)
	}
}

func TestTrackSeqlock(t *testing.T) {
	var tr track
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := int64(1); i <= 2000; i++ {
			tr.record(i, i*10, true)
		}
	}()
	for {
		v := tr.load()
		if v.runs > 0 && (v.ran != v.armed*10 || v.pending != v.ran || int64(v.runs) != v.armed) {
			t.Fatalf("inconsistent view %+v", v)
		}
		select {
		case <-done:
			return
		default:
		}
	}
}

func TestNotifyDropsWhenBusy(t *testing.T) {
	st := newSentinelState(systemClock{}, new([2]atomic.Uint64))
	st.notify()
	st.notify()
	st.notify()
	if d := st.drops.Load(); d != 2 {
		t.Fatalf("drops %d, want 2", d)
	}
	<-st.wake
	st.notify()
	if d := st.drops.Load(); d != 2 {
		t.Fatalf("drops %d after the wake-up was taken, want 2", d)
	}
}

// queuesDrained reports whether no finalizer and no cleanup waits to run.
func queuesDrained() bool {
	s := newSamples()
	metrics.Read(s)
	return u64(s, idxFinalizersQueued) == u64(s, idxFinalizersExecuted) &&
		u64(s, idxCleanupsQueued) == u64(s, idxCleanupsExecuted)
}

// settle runs GC cycles until both queues are empty.
func settle(t *testing.T) {
	t.Helper()
	runtime.GC() // one cycle at least, even if the queues are empty now
	testkit.AwaitGC(t, 10*time.Second, "finalizer and cleanup queues to drain", queuesDrained)
}

// TestStoppedSentinelDoesNotRearm: after Stop, the chains end. A sentinel
// the runtime had already queued may run once more; after that, GC cycles
// arm and run nothing.
func TestStoppedSentinelDoesNotRearm(t *testing.T) {
	s, err := New(WithInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	st := s.sent
	s.mu.Unlock()
	testkit.AwaitGC(t, 10*time.Second, "both chains to re-arm", func() bool {
		return st.fin.runs.Load() >= 2 && st.cln.runs.Load() >= 2
	})
	s.Stop()
	if s.sent != nil {
		t.Fatal("sampler still references the chains after Stop")
	}
	settle(t)
	settle(t)
	finArms, clnArms := st.fin.arms.Load(), st.cln.arms.Load()
	finRuns, clnRuns := st.fin.runs.Load(), st.cln.runs.Load()
	for range 5 {
		runtime.GC()
	}
	settle(t)
	if st.fin.arms.Load() != finArms || st.cln.arms.Load() != clnArms ||
		st.fin.runs.Load() != finRuns || st.cln.runs.Load() != clnRuns {
		t.Fatalf("chains still active after Stop: finalizer arms %d->%d runs %d->%d, cleanup arms %d->%d runs %d->%d",
			finArms, st.fin.arms.Load(), finRuns, st.fin.runs.Load(),
			clnArms, st.cln.arms.Load(), clnRuns, st.cln.runs.Load())
	}
}

// TestSentinelDoesNotKeepSamplerAlive: the callbacks reference the chain
// state, not the Sampler, so a stopped Sampler is collected.
func TestSentinelDoesNotKeepSamplerAlive(t *testing.T) {
	collected := make(chan struct{})
	func() {
		s, err := New(WithInterval(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(); err != nil {
			t.Fatal(err)
		}
		runtime.GC()
		s.Stop()
		runtime.AddCleanup(s, func(ch chan struct{}) { close(ch) }, collected)
	}()
	testkit.AwaitGC(t, 10*time.Second, "the stopped Sampler to be collected", func() bool {
		select {
		case <-collected:
			return true
		default:
			return false
		}
	})
}
