package memstats

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// step is one sampling round of a detector scenario: advance the clock,
// change the reading, sample, and expect these events (detector name, then
// "+" for firing or "-" for resolving, e.g. "forced_gc+").
type step struct {
	advance time.Duration
	set     func(r *reading)
	want    []string
}

func eventsString(evs []Event) []string {
	var s []string
	for _, e := range evs {
		sign := "-"
		if e.Firing {
			sign = "+"
		}
		s = append(s, e.Detector+sign)
	}
	return s
}

func TestDetectors(t *testing.T) {
	const mib = 1 << 20
	tests := []struct {
		name  string
		opts  []Option
		steps []step
	}{
		{
			name: "queue stalled fires and resolves",
			steps: []step{
				{set: func(r *reading) { r.finQueued, r.finExecuted = 3000, 500 }},
				{advance: 500 * time.Millisecond}, // still < DefaultQueueStalledFor
				// Not moving for 1.1s: stalled, and the delay is that long at least.
				{advance: 600 * time.Millisecond, want: []string{"finalizer_queue_stalled+", "queue_latency+"}},
				{advance: time.Second}, // still stalled, no new event
				// Moving again, and nothing more queued: draining (slowly), not stalled.
				{advance: time.Second, set: func(r *reading) { r.finExecuted = 501 }, want: []string{"finalizer_queue_stalled-"}},
			},
		},
		{
			name: "queue stalled on the cleanup queue",
			steps: []step{
				{set: func(r *reading) { r.clnQueued, r.clnExecuted = 5000, 10 }},
				{advance: 2 * time.Second, want: []string{"finalizer_queue_stalled+", "queue_latency+"}},
				{advance: time.Second, set: func(r *reading) { r.clnExecuted = 4500 }, want: []string{"finalizer_queue_stalled-", "queue_latency-"}},
			},
		},
		{
			name: "queue stalled resolves when the queue is short again",
			opts: []Option{WithQueueStalled(100, 0)},
			steps: []step{
				{set: func(r *reading) { r.finQueued, r.finExecuted = 200, 0 }},
				{advance: time.Millisecond, want: []string{"finalizer_queue_stalled+"}},
				{advance: time.Millisecond, set: func(r *reading) { r.finQueued = 50; r.finExecuted = 0 }, want: []string{"finalizer_queue_stalled-"}},
			},
		},
		{
			name: "queue at the threshold is not stalled",
			steps: []step{
				{set: func(r *reading) { r.finQueued, r.finExecuted = 1500, 500 }}, // length 1000, not > 1000
				{advance: 10 * time.Second, want: []string{"queue_latency+"}},      // but not moving for 10s
				{advance: 10 * time.Second},
			},
		},
		{
			name: "long but moving queue is not stalled",
			steps: []step{
				{set: func(r *reading) { r.finQueued, r.finExecuted = 9000, 0 }},
				// Nothing more queued: it drains faster than it fills,
				// though 9000 at 5/s is a long delay.
				{advance: 2 * time.Second, set: func(r *reading) { r.finExecuted = 10 }, want: []string{"queue_latency+"}},
				{advance: 2 * time.Second, set: func(r *reading) { r.finExecuted = 20 }},
			},
		},
		{
			name: "slow drain after a burst is a stall",
			steps: []step{
				{set: func(r *reading) { r.finQueued, r.finExecuted = 50, 50 }},
				{advance: 5 * time.Second}, // idle
				{advance: time.Second, set: func(r *reading) { r.finQueued = 3050 }},
				// 200/s drained against 3000 queued in the window (300/s).
				{advance: time.Second, set: func(r *reading) { r.finExecuted = 250 }, want: []string{"finalizer_queue_stalled+", "queue_latency+"}},
				{advance: time.Second, set: func(r *reading) { r.finExecuted = 450 }},
				// Down to 1000: the length condition ends it.
				{advance: 9 * time.Second, set: func(r *reading) { r.finExecuted = 2050 }, want: []string{"finalizer_queue_stalled-"}},
				{advance: 5 * time.Second, set: func(r *reading) { r.finExecuted = 3050 }, want: []string{"queue_latency-"}},
			},
		},
		{
			name: "idleness before a burst is not a stall",
			steps: []step{
				{set: func(r *reading) { r.finQueued, r.finExecuted = 50, 50 }},
				{advance: time.Second},
				{advance: time.Second}, // idle: the executed count stands still
				{advance: 100 * time.Millisecond, set: func(r *reading) { r.finQueued = 3050 }},
				// 1000 drained in a second: faster than it filled, though
				// the 2000 left take 2s.
				{advance: time.Second, set: func(r *reading) { r.finExecuted = 1050 }, want: []string{"queue_latency+"}},
				{advance: time.Second, set: func(r *reading) { r.finExecuted = 3050 }, want: []string{"queue_latency-"}},
			},
		},
		{
			name: "steady churn over the threshold is not a stall",
			steps: []step{
				{set: func(r *reading) { r.finQueued, r.finExecuted = 2000, 0 }},
				{advance: time.Second, set: func(r *reading) { r.finQueued, r.finExecuted = 4000, 2000 }},
				{advance: time.Second, set: func(r *reading) { r.finQueued, r.finExecuted = 6000, 4000 }},
				{advance: time.Second, set: func(r *reading) { r.finQueued, r.finExecuted = 8000, 6000 }},
			},
		},
		{
			name: "forced gc fires at five per minute and resolves",
			steps: []step{
				{set: func(r *reading) { r.forced = 0 }},
				{advance: 5 * time.Second, set: func(r *reading) { r.forced = 3 }},
				{advance: 5 * time.Second, set: func(r *reading) { r.forced = 5 }, want: []string{"forced_gc+"}},
				{advance: 30 * time.Second},
				{advance: 90 * time.Second, want: []string{"forced_gc-"}},
			},
		},
		{
			name: "forced gc below threshold",
			steps: []step{
				{set: func(r *reading) { r.forced = 100 }},
				{advance: 20 * time.Second, set: func(r *reading) { r.forced = 104 }}, // 4 so far: a count, not 12/min
				{advance: 61 * time.Second, set: func(r *reading) { r.forced = 105 }}, // the 4 are 61s old: 1 in the window
				{advance: 50 * time.Second, set: func(r *reading) { r.forced = 108 }}, // 4 in the window
			},
		},
		{
			name: "forced gc threshold is configurable",
			opts: []Option{WithForcedGC(2)},
			steps: []step{
				{},
				{advance: time.Second, set: func(r *reading) { r.forced = 2 }, want: []string{"forced_gc+"}},
			},
		},
		{
			name: "mcache fires when sustained for 30s",
			steps: []step{
				{set: func(r *reading) { r.mcacheInuse = 3 * mib }},
				{advance: 15 * time.Second},
				{advance: 14 * time.Second},
				{advance: time.Second, want: []string{"mcache_inuse+"}},
				{advance: time.Second, set: func(r *reading) { r.mcacheInuse = mib }, want: []string{"mcache_inuse-"}},
			},
		},
		{
			name: "mcache dip restarts the 30s",
			steps: []step{
				{set: func(r *reading) { r.mcacheInuse = 3 * mib }},
				{advance: 20 * time.Second, set: func(r *reading) { r.mcacheInuse = 2 * mib }}, // not > 2 MiB
				{advance: time.Second, set: func(r *reading) { r.mcacheInuse = 3 * mib }},
				{advance: 20 * time.Second},
				{advance: 10 * time.Second, want: []string{"mcache_inuse+"}},
			},
		},
		{
			name: "mcache below threshold",
			steps: []step{
				{set: func(r *reading) { r.mcacheInuse = 64 << 10 }},
				{advance: time.Hour},
			},
		},
		{
			name: "queue latency fires and resolves",
			steps: []step{
				{set: func(r *reading) { r.finLatency = time.Millisecond }},
				// An overdue sentinel counts whatever the queue's length.
				{advance: time.Second, set: func(r *reading) { r.finLatency, r.finPending = 1500*time.Millisecond, true }, want: []string{"queue_latency+"}},
				{advance: time.Second, set: func(r *reading) { r.finLatency = 2500 * time.Millisecond }},
				{advance: time.Second, set: func(r *reading) { r.finLatency, r.finPending, r.finRuns = 2*time.Millisecond, false, 1 }, want: []string{"queue_latency-"}},
			},
		},
		{
			name: "queue latency of cleanups",
			steps: []step{
				{set: func(r *reading) { r.clnLatency, r.clnPending = 3*time.Second, true }, want: []string{"queue_latency+"}},
			},
		},
		{
			name: "finished sentinel counts until the queue is seen empty",
			steps: []step{
				{set: func(r *reading) { r.finQueued, r.finExecuted = 10, 0 }},
				{advance: 100 * time.Millisecond, set: func(r *reading) {
					r.finExecuted, r.finLatency, r.finRuns = 5, 3*time.Second, 1
				}, want: []string{"queue_latency+"}},
				{advance: 100 * time.Millisecond},
				// Drained: the 3s sentinel describes a queue that is gone,
				// though no GC cycle ran a newer sentinel.
				{advance: 100 * time.Millisecond, set: func(r *reading) { r.finExecuted = 10 }, want: []string{"queue_latency-"}},
				{advance: time.Minute},
			},
		},
		{
			name: "finished sentinel on an empty queue does not count",
			steps: []step{
				{set: func(r *reading) { r.finLatency, r.finRuns = 3*time.Second, 1 }},
			},
		},
		{
			name: "queue latency at the threshold does not fire",
			steps: []step{
				{set: func(r *reading) { r.finLatency, r.clnLatency = time.Second, 999*time.Millisecond }},
			},
		},
		{
			name: "disabled detector stays silent",
			opts: []Option{WithoutDetector(DetectorQueueLatency)},
			steps: []step{
				{set: func(r *reading) { r.finLatency = time.Hour }},
			},
		},
		{
			name: "several detectors in one round",
			opts: []Option{WithMCacheInuse(1, 0)},
			steps: []step{
				{set: func(r *reading) { r.mcacheInuse = 2; r.finLatency, r.finPending = time.Hour, true }, want: []string{"mcache_inuse+", "queue_latency+"}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFed(t, tt.opts...)
			for i, st := range tt.steps {
				if st.set != nil {
					st.set(&f.r)
				}
				f.round(st.advance)
				got := strings.Join(eventsString(f.take()), ",")
				if want := strings.Join(st.want, ","); got != want {
					t.Fatalf("step %d: events %q, want %q", i, got, want)
				}
			}
		})
	}
}

func TestDetectorEventFields(t *testing.T) {
	f := newFed(t, WithMCacheInuse(1<<20, 10*time.Second))
	start := f.clk.Now()
	f.r.mcacheInuse = 3 << 20
	f.round(0)
	f.round(10 * time.Second)
	evs := f.take()
	if len(evs) != 1 {
		t.Fatalf("got %d events, want 1", len(evs))
	}
	want := Event{Detector: DetectorMCacheInuse, Value: 3 << 20, Threshold: 1 << 20,
		Since: start, Time: start.Add(10 * time.Second), Firing: true}
	if evs[0] != want {
		t.Fatalf("fired %+v\nwant     %+v", evs[0], want)
	}

	f.r.mcacheInuse = 5 << 20
	f.round(time.Second)
	active := f.s.Active(nil)
	if len(active) != 1 || active[0].Value != 5<<20 || !active[0].Firing || active[0].Since != start {
		t.Fatalf("Active = %+v, want the mcache event with the latest value", active)
	}

	f.r.mcacheInuse = 0
	f.round(time.Second)
	evs = f.take()
	want = Event{Detector: DetectorMCacheInuse, Value: 0, Threshold: 1 << 20,
		Since: start, Time: start.Add(12 * time.Second), Firing: false}
	if len(evs) != 1 || evs[0] != want {
		t.Fatalf("resolved %+v\nwant        %+v", evs, want)
	}
	if active := f.s.Active(nil); len(active) != 0 {
		t.Fatalf("Active after resolving = %+v", active)
	}
}

func TestQueueStalledSince(t *testing.T) {
	f := newFed(t, WithoutDetector(DetectorQueueLatency))
	t0 := f.clk.Now()
	f.r.finQueued, f.r.finExecuted = 5000, 100
	f.round(0)
	f.round(400 * time.Millisecond)
	f.round(700 * time.Millisecond)
	evs := f.take()
	if len(evs) != 1 {
		t.Fatalf("events %v, want one", eventsString(evs))
	}
	if e := evs[0]; e.Since != t0 || e.Value != 4900 || e.Threshold != DefaultQueueStalledLength {
		t.Fatalf("event %+v: want Since=%v (last progress), Value=4900, Threshold=%d", e, t0, DefaultQueueStalledLength)
	}
}

func TestSubscribe(t *testing.T) {
	f := newFed(t, WithQueueLatency(time.Second))
	var got []string
	cancel := f.s.Subscribe(func(e Event) {
		// A handler may read the sampler and subscribe: the round's
		// lock is released and the list is copied on write.
		_ = f.s.Snapshot()
		f.s.Subscribe(func(Event) {})()
		got = append(got, fmt.Sprint(e.Detector, e.Firing))
	})
	f.r.finLatency, f.r.finPending = 2*time.Second, true
	f.round(time.Second)
	cancel()
	cancel() // harmless
	f.r.finLatency = 0
	f.round(time.Second)
	if len(got) != 1 || got[0] != "queue_latencytrue" {
		t.Fatalf("cancelled subscriber got %v, want only the firing event", got)
	}
	if evs := f.take(); len(evs) != 2 {
		t.Fatalf("other subscriber got %v, want both events", eventsString(evs))
	}
	f.s.Subscribe(nil)() // nil handler is ignored
	f.round(time.Second)
}
