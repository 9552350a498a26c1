package memstats

import (
	"sync"
	"time"
)

// manualClock is a Clock that moves only when the test says so.
type manualClock struct {
	mu      sync.Mutex
	now     time.Time
	tickers []*manualTicker
}

var _ Clock = (*manualClock)(nil)

func newManualClock() *manualClock {
	return &manualClock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) NewTicker(d time.Duration) Ticker {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &manualTicker{c: make(chan time.Time, 1), every: d, next: c.now.Add(d)}
	c.tickers = append(c.tickers, t)
	return t
}

// Advance moves the clock by d and fires the tickers that are due (at most
// one pending tick each, like time.Ticker, which drops ticks for slow
// receivers).
func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	for _, t := range c.tickers {
		t.mu.Lock()
		for !t.stopped && !t.next.After(c.now) {
			select {
			case t.c <- t.next:
			default:
			}
			t.next = t.next.Add(t.every)
		}
		t.mu.Unlock()
	}
}

// Tickers returns how many tickers were created and are not stopped.
func (c *manualClock) Tickers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, t := range c.tickers {
		t.mu.Lock()
		if !t.stopped {
			n++
		}
		t.mu.Unlock()
	}
	return n
}

type manualTicker struct {
	mu      sync.Mutex
	c       chan time.Time
	every   time.Duration
	next    time.Time
	stopped bool
}

func (t *manualTicker) C() <-chan time.Time { return t.c }

func (t *manualTicker) Stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopped = true
}
