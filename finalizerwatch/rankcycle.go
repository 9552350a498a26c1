package finalizerwatch

import "github.com/gcprobe/probe/internal/gcclock"

// Ranking off the scrape path.
//
// The ranking is O(ledger) and due once per GC cycle. Done by the first
// Read of each cycle, it lands on a scrape; RankEachCycle moves it to a
// goroutine of the caller's, woken when a cycle ends. The wake-up comes
// from the GC-cycle clock, whose ticks run on the finalizer goroutine (or
// a cleanup goroutine) and must never block or do O(N) work: the tick
// only makes a non-blocking send on a channel of capacity one, and the
// ranking runs on the caller's goroutine. The Watcher itself still starts
// no goroutine.

// RankEachCycle ranks the ledger after each GC cycle, on the calling
// goroutine, until done is closed: so that Read, which otherwise ranks on
// the first read of each cycle, finds the ranking made and costs O(K). It
// ranks only when the ranking is out of date (a cycle of either kind has
// ended, or the ledger has gained an entry, since the last one), for as
// many sites as the latest Read that used the ranking asked for (at least
// one). Each ranking costs what Rank does, once per cycle of each kind at
// most (ticks that come before the goroutine wakes are coalesced).
//
// The probe runs it on a goroutine of its own while it runs. A program
// that reads the watcher itself runs it as
//
//	go w.RankEachCycle(ctx.Done())
func (w *Watcher) RankEachCycle(done <-chan struct{}) {
	// init subscribes the watcher to the clock before this subscription:
	// a tick tells the listeners in the order they subscribed, so the
	// watcher has counted a cycle by the time the wake-up for it is sent.
	w.init()
	l := rankWaker{make(chan struct{}, 1)}
	sub := gcclock.Subscribe(l)
	defer sub.Cancel()
	for {
		select {
		case <-done:
			return
		case <-l.wake:
		}
		w.rankIfStale()
	}
}

// rankWaker wakes RankEachCycle's goroutine on every tick of the clock.
type rankWaker struct{ wake chan struct{} }

// Tick runs on the finalizer or a cleanup goroutine: a non-blocking send;
// a wake-up already pending covers this tick too.
func (l rankWaker) Tick(gcclock.Kind) bool {
	select {
	case l.wake <- struct{}{}:
	default:
	}
	return true
}

// rankIfStale ranks unless the ranking serves the latest read's K now.
func (w *Watcher) rankIfStale() {
	w.rankMu.Lock()
	defer w.rankMu.Unlock()
	k := max(w.rank.k, 1)
	if w.rankCurrent(k) {
		return
	}
	rtSettle()
	w.rankLocked(k)
	if w.rank.ranked != nil {
		w.rank.ranked()
	}
}
