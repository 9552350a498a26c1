package main

import (
	"context"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/gcprobe/probe/finalizerwatch"
)

// The finalizer-queue part of the demo: a burst of slow finalizers that
// puts the queue seconds behind, then a finalizer that blocks for a few
// seconds and is released. Each round takes queueRound:
//
//	0s   a burst of 1 500 finalizers of 4 ms each: 6 s of work. The
//	     table shows the queue's length and delay rising and
//	     "firing: queue_latency" within a second or two; once the queue
//	     has drained, the delay is back to 0 and the detector clears.
//	10s  a finalizer that blocks for blockFor. After a second the table
//	     shows "firing: ... finalizer_blocked (..., finalizer
//	     main.blockOnce.func1 .../queue.go:NN)" and a "running now:"
//	     line naming it; everything queued behind it waits (the
//	     healthy traffic's finalizers pile up, and finalizer_queue_stalled
//	     fires too). Released, it clears.
const (
	queueRound = 20 * time.Second
	burstSize  = 1500
	burstEach  = 4 * time.Millisecond
	blockAt    = 10 * time.Second
	blockFor   = 3 * time.Second

	// backlogHeld is how many slow finalizers a pacer that holds the
	// backlog (keepBacklog) keeps waiting.
	backlogHeld = burstSize / 2
)

type slowConn struct {
	fd  int
	buf [64]byte
}

// queuePacer sets the pace of the queue trouble: how long the slow burst's
// backlog is kept up, when the blocker comes, and when it lets go. The
// demo goes by the clock (timedPacer); a test holds each phase open until
// it has seen what that phase shows, however slow a loaded machine makes
// it.
type queuePacer interface {
	// keepBacklog returns once the burst's backlog may drain; while it
	// waits, top calls register more slow finalizers to keep the queue
	// behind. It reports whether ctx is still going.
	keepBacklog(ctx context.Context, top func()) bool
	// beforeBlock waits between the burst and the blocker.
	beforeBlock(ctx context.Context) bool
	// hold is what the blocking finalizer does: it returns when the
	// blocker is to let go, or when ctx ends (so that the demo stops
	// promptly and never keeps the finalizer goroutine).
	hold(ctx context.Context)
	// afterBlock waits between the blocker and the next round.
	afterBlock(ctx context.Context) bool
}

// timedPacer is the demo's pace: the timeline above.
type timedPacer struct{}

func (timedPacer) keepBacklog(context.Context, func()) bool { return true }
func (timedPacer) beforeBlock(ctx context.Context) bool     { return sleepCtx(ctx, blockAt) }
func (timedPacer) afterBlock(ctx context.Context) bool      { return sleepCtx(ctx, queueRound-blockAt) }
func (timedPacer) hold(ctx context.Context)                 { sleepCtx(ctx, blockFor) }

// queueTrouble runs rounds of a slow burst and a blocking finalizer, at
// pace's pace, until ctx ends.
func queueTrouble(ctx context.Context, pace queuePacer) {
	for {
		slowBurst(burstSize)
		if !pace.keepBacklog(ctx, topUpBacklog) || !pace.beforeBlock(ctx) {
			return
		}
		blockOnce(ctx, pace)
		if !pace.afterBlock(ctx) {
			return
		}
	}
}

// slowQueued counts the slow burst's finalizers not yet run.
var slowQueued atomic.Int64

// slowBurst registers n finalizers that take burstEach each and makes
// their objects garbage at once.
func slowBurst(n int) {
	slowQueued.Add(int64(n))
	for i := range n {
		c := &slowConn{fd: i}
		finalizerwatch.SetFinalizer(c, func(*slowConn) { // marker: slow-burst
			time.Sleep(burstEach)
			slowQueued.Add(-1)
		})
	}
	runtime.GC()
}

// topUpBacklog registers slow finalizers, once fewer than two thirds of
// backlogHeld wait, until backlogHeld do: their work, 2 to 3 s, keeps the
// queue's delay over the queue_latency threshold (1 s), however long the
// pacer holds it.
func topUpBacklog() {
	if q := slowQueued.Load(); q < 2*backlogHeld/3 {
		slowBurst(int(backlogHeld - q))
	}
}

// blockOnce registers a finalizer that blocks the finalizer goroutine until
// pace lets it go (blockFor, in the demo), and makes its object garbage.
func blockOnce(ctx context.Context, pace queuePacer) {
	c := &slowConn{}
	finalizerwatch.SetFinalizer(c, func(*slowConn) { pace.hold(ctx) }) // marker: blocking-finalizer
	runtime.GC()
}

// sleepCtx waits for d or for ctx to end; it reports whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
