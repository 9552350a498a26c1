package memstats

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func TestOptionErrors(t *testing.T) {
	tests := []struct {
		name string
		give []Option
		want string // the whole error message
	}{
		{"nil clock", []Option{WithClock(nil)}, "memstats: WithClock: clock must not be nil"},
		{"negative interval", []Option{WithInterval(-time.Second)}, "memstats: WithInterval: interval must be > 0, got -1s"},
		{"zero interval", []Option{WithInterval(0)}, "memstats: WithInterval: interval must be > 0, got 0s"},
		{"zero history", []Option{WithHistory(0)}, "memstats: WithHistory: history must be between 1 and 65536 cycles, got 0"},
		{"huge history", []Option{WithHistory(MaxHistory + 1)}, "memstats: WithHistory: history must be between 1 and 65536 cycles, got 65537"},
		{"zero window", []Option{WithPauseWindow(0)}, "memstats: WithPauseWindow: window must be at least 1 cycle, got 0"},
		{"window over history", []Option{WithHistory(10), WithPauseWindow(11)}, "memstats: WithPauseWindow: window of 11 cycles exceeds the history of 10 (WithHistory)"},
		{"no buckets", []Option{WithPauseBuckets(nil)}, "memstats: WithPauseBuckets: need at least one bound"},
		{"nil option", []Option{WithInterval(time.Second), nil}, "memstats: New: nil Option"},
		{"negative bucket", []Option{WithPauseBuckets([]float64{-1})}, "memstats: WithPauseBuckets: bound 0 must be positive and finite, got -1"},
		{"NaN bucket", []Option{WithPauseBuckets([]float64{1, math.NaN()})}, "memstats: WithPauseBuckets: bound 1 must be positive and finite, got NaN"},
		{"inf bucket", []Option{WithPauseBuckets([]float64{math.Inf(1)})}, "memstats: WithPauseBuckets: bound 0 must be positive and finite, got +Inf"},
		{"unsorted buckets", []Option{WithPauseBuckets([]float64{1, 1})}, "memstats: WithPauseBuckets: bounds must increase, got 1 after 1"},
		{"zero rate window", []Option{WithRateWindow(0)}, "memstats: WithRateWindow: window must be > 0, got 0s"},
		{"ReadMemStats too often", []Option{WithReadMemStatsInterval(999 * time.Millisecond)}, "memstats: WithReadMemStatsInterval: interval must be at least 1s, got 999ms"},
		{"zero stalled length", []Option{WithQueueStalled(0, time.Second)}, "memstats: WithQueueStalled: length must be > 0"},
		{"negative stall", []Option{WithQueueStalled(1, -1)}, "memstats: WithQueueStalled: duration must be >= 0, got -1ns"},
		{"zero forced rate", []Option{WithForcedGC(0)}, "memstats: WithForcedGC: rate must be positive and finite, got 0"},
		{"NaN forced rate", []Option{WithForcedGC(math.NaN())}, "memstats: WithForcedGC: rate must be positive and finite, got NaN"},
		{"zero mcache", []Option{WithMCacheInuse(0, time.Second)}, "memstats: WithMCacheInuse: bytes must be > 0"},
		{"negative mcache duration", []Option{WithMCacheInuse(1, -time.Second)}, "memstats: WithMCacheInuse: duration must be >= 0, got -1s"},
		{"zero latency", []Option{WithQueueLatency(0)}, "memstats: WithQueueLatency: threshold must be > 0, got 0s"},
		{"unknown detector", []Option{WithoutDetector("gc_storm")}, `memstats: WithoutDetector: unknown detector "gc_storm"`},
		{"zero queue window", []Option{WithQueueWindow(0)}, "memstats: WithQueueWindow: window must be > 0, got 0s"},
		{"zero blocked threshold", []Option{WithFinalizerBlocked(0)}, "memstats: WithFinalizerBlocked: threshold must be > 0, got 0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(tt.give...)
			if err == nil {
				t.Fatalf("New succeeded, want %q", tt.want)
			}
			if s != nil {
				t.Errorf("New returned a sampler with an error")
			}
			if err.Error() != tt.want {
				t.Errorf("error %q\nwant  %q", err, tt.want)
			}
			if !errors.Is(err, ErrInvalidOption) {
				t.Errorf("errors.Is(%v, ErrInvalidOption) = false", err)
			}
			var oe *OptionError
			if !errors.As(err, &oe) || !strings.HasPrefix(tt.want, "memstats: "+oe.Option+":") {
				t.Errorf("errors.As: %#v does not name the option", oe)
			}
		})
	}
}

func TestOptionsApplied(t *testing.T) {
	clk := newManualClock()
	bounds := []float64{0.001, 0.01}
	s, err := New(
		WithClock(clk),
		WithInterval(time.Minute),
		WithHistory(10),
		WithPauseWindow(5),
		WithPauseBuckets(bounds),
		WithRateWindow(time.Hour),
		WithReadMemStats(true),
		WithReadMemStatsInterval(time.Second),
		WithQueueStalled(7, 0),
		WithForcedGC(1.5),
		WithMCacheInuse(3, time.Millisecond),
		WithQueueLatency(time.Millisecond),
		WithoutDetector(DetectorForcedGC),
	)
	if err != nil {
		t.Fatal(err)
	}
	c := s.cfg
	if c.clock != clk || c.interval != time.Minute || c.history != 10 || c.pauseWindow != 5 ||
		c.rateWindow != time.Hour || !c.readMemStats || c.readMemStatsEvery != time.Second ||
		c.stalledLength != 7 || c.stalledFor != 0 || c.forcedPerMinute != 1.5 ||
		c.mcacheBytes != 3 || c.mcacheFor != time.Millisecond || c.queueLatency != time.Millisecond ||
		!c.disabled[detForced] || c.disabled[detLatency] {
		t.Fatalf("config not applied: %+v", c)
	}
	bounds[0] = 99 // the sampler keeps its own copy
	if h := s.Snapshot().PauseHistogram; len(h.Bounds) != 2 || h.Bounds[0] != 0.001 || len(h.Counts) != 3 {
		t.Fatalf("histogram shape %+v", h)
	}
	if !s.Snapshot().ReadMemStats.Enabled {
		t.Fatal("ReadMemStats.Enabled = false")
	}
}

func TestPauseWindowFollowsShortHistory(t *testing.T) {
	s, err := New(WithHistory(8))
	if err != nil {
		t.Fatal(err)
	}
	if s.cfg.pauseWindow != 8 {
		t.Fatalf("default window with history 8 = %d, want 8", s.cfg.pauseWindow)
	}
}

func TestDefaults(t *testing.T) {
	s, err := New()
	if err != nil {
		t.Fatal(err)
	}
	c := s.cfg
	if _, ok := c.clock.(systemClock); !ok || c.interval != DefaultInterval || c.history != DefaultHistory ||
		c.pauseWindow != DefaultPauseWindow || c.rateWindow != DefaultRateWindow || c.readMemStats ||
		c.readMemStatsEvery != DefaultMinReadMemStatsInterval || c.stalledLength != DefaultQueueStalledLength ||
		c.forcedPerMinute != DefaultForcedGCPerMinute || c.mcacheBytes != DefaultMCacheInuseBytes ||
		c.mcacheFor != DefaultMCacheInuseFor || c.queueLatency != DefaultQueueLatency ||
		c.queueWindow != DefaultQueueWindow || c.blockedAfter != DefaultFinalizerBlocked || c.running != nil {
		t.Fatalf("defaults: %+v", c)
	}
	if len(s.hist.Bounds) != len(PauseBuckets) || &s.hist.Bounds[0] == &PauseBuckets[0] {
		t.Fatal("PauseBuckets not copied")
	}
}
