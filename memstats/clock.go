package memstats

import "time"

// Clock is the sampler's source of time. Every decision that depends on
// time goes through it: the sampling interval, Snapshot.Time, the windows of
// GCCPUFraction and ForcedPerMinute, how long a detector's condition has
// held, the ReadMemStats rate limit and the sentinels' timestamps. Tests
// inject a manual clock with WithClock so that "sustained for 30 s" is tested
// without sleeping.
//
// Now is also called from the sentinels' finalizer and cleanup, so it must be
// cheap and must never block.
//
// The queue latency compares sentinel timestamps with the runtime's own
// record of when each GC cycle ended, which is wall-clock time: with a clock
// other than the system's, latencies measured from the real runtime are
// meaningless (a test clock is meant for tests that feed readings in).
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTicker returns a ticker that delivers ticks every d, like
	// time.NewTicker. d is always > 0.
	NewTicker(d time.Duration) Ticker
}

// Ticker is the part of *time.Ticker the sampler uses.
type Ticker interface {
	// C returns the channel on which ticks are delivered.
	C() <-chan time.Time
	// Stop turns the ticker off; no more ticks are delivered after it.
	Stop()
}

// systemClock is the default Clock: package time.
type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) NewTicker(d time.Duration) Ticker {
	return systemTicker{time.NewTicker(d)}
}

type systemTicker struct{ t *time.Ticker }

func (t systemTicker) C() <-chan time.Time { return t.t.C }
func (t systemTicker) Stop()               { t.t.Stop() }
