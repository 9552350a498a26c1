package finalizerwatch

import (
	"cmp"
	"slices"
	"time"

	"github.com/gcprobe/probe/stackcapture"
)

// clockBase is the origin of the times a site records for its running
// callback.
var clockBase = time.Now()

// monoNow reads the monotonic clock, in nanoseconds since clockBase. It is
// time.Since, which reads only the monotonic clock, where time.Now reads
// the wall clock too: one clock read instead of two.
func monoNow() int64 { return int64(time.Since(clockBase)) }

// begin records that a callback at s started at start (monoNow), unless
// one is running there already (cleanups may run concurrently): then the
// earlier one stays the one reported. It returns the token end takes.
func (s *site) begin(start int64) int64 {
	t := start | 1 // never 0, which means none
	if s.running.CompareAndSwap(0, t) {
		return t
	}
	return 0
}

// end records that the callback begin returned tok for has returned.
func (s *site) end(tok int64) {
	if tok != 0 {
		s.running.CompareAndSwap(tok, 0)
	}
}

// RunningCallback is a finalizer or cleanup registered through the watcher
// that is running now.
type RunningCallback struct {
	Kind Kind
	Site stackcapture.Frame
	// For is how long it has been running. A finalizer that runs for long
	// holds up every finalizer queued behind it: the runtime runs them one
	// at a time, on one goroutine.
	For time.Duration
}

// Running returns the watched finalizers and cleanups running now, one per
// site (where several cleanups of a site run at once, the one that started
// first), the longest running first. It reads every site of the ledger.
func (w *Watcher) Running() []RunningCallback {
	w.init()
	now := monoNow()
	var out []RunningCallback
	add := func(s *site) {
		if t := s.running.Load(); t != 0 {
			out = append(out, RunningCallback{Kind: s.kind, Site: s.siteFrame(), For: time.Duration(max(0, now-t))})
		}
	}
	w.sites.Range(func(_ siteKey, s *site) bool {
		add(s)
		return true
	})
	for k := range w.overflow {
		add(&w.overflow[k])
	}
	slices.SortFunc(out, func(a, b RunningCallback) int { return cmp.Compare(b.For, a.For) })
	return out
}
