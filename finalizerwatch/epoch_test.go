package finalizerwatch

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gcprobe/probe/internal/testkit"
)

// withClock makes the watcher read its time from *now, which the test
// moves.
func withClock(now *atomic.Int64) Option {
	return func(c *config) error {
		c.now = now.Load
		return nil
	}
}

// timeRun is a busy server's life in the ledger, on a clock the test
// drives: gcPerSec GC cycles a second for secs seconds, each tick of both
// kinds made by the test (a GC cycle the runtime runs meanwhile ticks at
// the same instant, and so begins no ledger cycle of its own). Every
// cycle churns (registers and clears); a pool fills during the first ten
// seconds and is kept; fifty files opened at start-up are kept; a leak
// keeps one object every leakEvery, forever. reads is called once a
// second with the ranking.
type timeRun struct {
	age       time.Duration
	gcPerSec  int
	secs      int
	leakEvery time.Duration
}

// The sites of the run, one line each.
func (r timeRun) run(t *testing.T, read func(sec int, sites []SiteStats)) {
	var clock atomic.Int64
	w := newWatcher(t, WithSuspectAge(r.age), withClock(&clock))
	var kept []*thing
	keep := func(site string) {
		o := &thing{}
		switch site {
		case "pool":
			w.SetFinalizer(o, func(*thing) {}) // marker: t-pool
		case "startup":
			w.SetFinalizer(o, func(*thing) {}) // marker: t-startup
		case "leak":
			w.SetFinalizer(o, func(*thing) {}) // marker: t-leak
		}
		kept = append(kept, o)
	}
	for range 50 {
		keep("startup")
	}
	step := time.Second / time.Duration(r.gcPerSec)
	nextLeak := time.Duration(0)
	for i := 1; i <= r.secs*r.gcPerSec; i++ {
		at := time.Duration(i) * step
		now := int64(at)
		clock.Store(now)
		for range 5 {
			o := &thing{}
			w.SetFinalizer(o, func(*thing) {}) // marker: t-churn
			w.SetFinalizer(o, nil)
		}
		if at <= 10*time.Second && i%(r.gcPerSec/10) == 0 {
			for range 2 {
				keep("pool") // 20 a second for 10 s
			}
		}
		for at >= nextLeak {
			keep("leak")
			nextLeak += r.leakEvery
		}
		w.tick(KindFinalizer, now)
		w.tick(KindCleanup, now)
		if i%r.gcPerSec == 0 {
			read(i/r.gcPerSec, w.top(0))
		}
	}
	_ = kept
}

// A busy server judged in time: a leak of a few objects a second is
// classed growing within 90 s, and a pool warming up, start-up files and
// churn never are. Side by side, the same life judged in GC cycles alone
// (no suspect age) takes the pool warming up for a leak within a second.
func TestGrowthJudgedInTime(t *testing.T) {
	lines := map[string]int{}
	for _, s := range []string{"pool", "startup", "leak", "churn"} {
		lines[s] = testkit.MarkerLine(t, "epoch_test.go", "t-"+s)
	}
	classes := func(sites []SiteStats) map[string]Class {
		m := map[string]Class{}
		for name, line := range lines {
			if s, ok := siteByLine(sites, line); ok {
				m[name] = s.Class
			}
		}
		return m
	}
	for _, tt := range []struct {
		gcPerSec  int
		leakEvery time.Duration
	}{
		{50, 200 * time.Millisecond}, // 5 a second, at 50 GC cycles a second
		{10, 2 * time.Second},        // one every 2 s, at 10 a second
	} {
		t.Run(fmt.Sprintf("%d GC/s, leak every %v", tt.gcPerSec, tt.leakEvery), func(t *testing.T) {
			grewAt := 0
			timeRun{age: 30 * time.Second, gcPerSec: tt.gcPerSec, secs: 120, leakEvery: tt.leakEvery}.run(t, func(sec int, sites []SiteStats) {
				c := classes(sites)
				for _, name := range []string{"pool", "startup", "churn"} {
					if c[name] == ClassGrowing {
						t.Fatalf("at %d s: %s classed growing, a false alarm", sec, name)
					}
				}
				switch {
				case c["leak"] == ClassGrowing && grewAt == 0:
					grewAt = sec
				case c["leak"] != ClassGrowing && grewAt != 0:
					t.Fatalf("at %d s: the leak, growing since %d s, is %v", sec, grewAt, c["leak"])
				}
			})
			if grewAt == 0 || grewAt > 90 {
				t.Fatalf("the leak was classed growing at %d s, want within 90 s", grewAt)
			}
			t.Logf("the leak classed growing at %d s", grewAt)

			// The same life in GC cycles alone.
			poolGrew := 0
			timeRun{age: 0, gcPerSec: tt.gcPerSec, secs: 120, leakEvery: tt.leakEvery}.run(t, func(sec int, sites []SiteStats) {
				if poolGrew == 0 && classes(sites)["pool"] == ClassGrowing {
					poolGrew = sec
				}
			})
			if poolGrew == 0 {
				t.Errorf("judged in cycles alone, the pool was never classed growing: the side-by-side no longer shows what the age fixes")
			}
			t.Logf("judged in cycles alone, the pool warming up was classed growing at %d s", poolGrew)
		})
	}
}

// The suspect age holds from the end of a registration's ledger cycle: at
// no read is a registration younger than the age a suspect, nor one older
// than the age plus a ledger cycle not.
func TestSuspectAgeBounds(t *testing.T) {
	const age = 30 * time.Second
	var clock atomic.Int64
	w := newWatcher(t, WithSuspectAge(age), withClock(&clock))
	var kept []*thing
	born := map[int]time.Duration{} // registrations by second
	line := testkit.MarkerLine(t, "epoch_test.go", "t-aged")
	for sec := 1; sec <= 100; sec++ {
		o := &thing{}
		w.SetFinalizer(o, func(*thing) {}) // marker: t-aged
		kept = append(kept, o)
		born[sec] = time.Duration(sec-1) * time.Second
		for i := range 20 { // 20 GC cycles a second
			now := int64(time.Duration(sec-1)*time.Second + time.Duration(i+1)*50*time.Millisecond)
			clock.Store(now)
			w.tick(KindFinalizer, now)
			w.tick(KindCleanup, now)
		}
		s, _ := siteByLine(w.top(0), line)
		t0 := time.Duration(clock.Load())
		var atLeast, atMost uint64 // registrations at least age+one ledger cycle old, at least age old
		for _, b := range born {
			if t0-b >= age+age/epochsPerAge+time.Second {
				atLeast++
			}
			if t0-b >= age {
				atMost++
			}
		}
		if s.Suspect < atLeast || s.Suspect > atMost {
			t.Fatalf("at %v: %d suspects, want between %d and %d", t0, s.Suspect, atLeast, atMost)
		}
	}
	_ = kept
	if got := w.moreTime(); got != 0 {
		t.Errorf("moreTime() = %v after 100 s, want 0", got)
	}
}

func TestWithSuspectAgeRefusesBadValues(t *testing.T) {
	for _, d := range []time.Duration{-time.Second, MaxSuspectAge + 1} {
		if _, err := New(WithSuspectAge(d)); err == nil {
			t.Errorf("WithSuspectAge(%v): no error", d)
		}
	}
}

// SetSuspectAge counts ages in time from the call: registrations made
// before, old in cycles, are not suspects until the age has passed since.
func TestSetSuspectAge(t *testing.T) {
	var clock atomic.Int64
	w := newWatcher(t, withClock(&clock))
	line := testkit.MarkerLine(t, "epoch_test.go", "t-set")
	var kept []*thing
	for range 10 {
		o := &thing{}
		w.SetFinalizer(o, func(*thing) {}) // marker: t-set
		kept = append(kept, o)
	}
	for range 5 {
		w.tick(KindFinalizer, clock.Load())
		w.tick(KindCleanup, clock.Load())
	}
	if s, _ := siteByLine(w.top(0), line); s.Suspect != 10 {
		t.Fatalf("by cycles alone: %d suspects, want 10", s.Suspect)
	}
	if err := w.SetSuspectAge(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := w.SetSuspectAge(-1); err == nil || !strings.Contains(err.Error(), "SetSuspectAge") {
		t.Errorf("SetSuspectAge(-1): %v, want an error naming it", err)
	}
	for sec := 1; sec <= 40; sec++ {
		clock.Store(int64(time.Duration(sec) * time.Second))
		w.tick(KindFinalizer, clock.Load())
		w.tick(KindCleanup, clock.Load())
		s, _ := siteByLine(w.top(0), line)
		more := w.moreTime()
		switch {
		case sec < 30 && (s.Suspect != 0 || more == 0):
			t.Fatalf("%d s after SetSuspectAge: %d suspects, %v more needed; want 0 and more than 0", sec, s.Suspect, more)
		case sec >= 36 && (s.Suspect != 10 || more != 0):
			t.Fatalf("%d s after SetSuspectAge: %d suspects, %v more needed; want 10 and 0", sec, s.Suspect, more)
		}
	}
	if got := w.SuspectAge(); got != 30*time.Second {
		t.Errorf("SuspectAge() = %v", got)
	}
	_ = kept
}
