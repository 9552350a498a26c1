package memstats

import (
	"sync"
	"testing"
	"time"
)

// fed is a Sampler whose rounds read a reading the test sets, on a manual
// clock: detectors and derived signals become deterministic.
type fed struct {
	t   *testing.T
	s   *Sampler
	clk *manualClock
	r   reading
	// wait is what the runtime's scheduling latencies read (runWait).
	wait runWaitTotal

	mu     sync.Mutex
	events []Event
}

func newFed(t *testing.T, opts ...Option) *fed {
	t.Helper()
	clk := newManualClock()
	// No hysteresis unless the test asks: most tests look at the
	// conditions themselves (TestCauseHysteresis looks at the rest).
	s, err := New(append([]Option{WithClock(clk), WithCauseHysteresis(0, 0)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	s.cfg.pressure = func() (cpuPressure, bool) { return cpuPressure{}, false }
	f := &fed{t: t, s: s, clk: clk}
	s.cfg.runWait = func() runWaitTotal { return f.wait }
	s.read = func(_ time.Time, r *reading) { *r = f.r }
	s.Subscribe(func(e Event) {
		f.mu.Lock()
		f.events = append(f.events, e)
		f.mu.Unlock()
	})
	return f
}

// round advances the clock by d and samples once.
func (f *fed) round(d time.Duration) Snapshot {
	f.clk.Advance(d)
	f.s.Sample()
	return f.s.Snapshot()
}

// take returns and forgets the events received so far.
func (f *fed) take() []Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.events
	f.events = nil
	return e
}
