package main

import (
	"context"
	"runtime"
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
)

type slowConn struct {
	fd  int
	buf [64]byte
}

// queueTrouble runs rounds of a slow burst and a blocking finalizer until
// ctx ends.
func queueTrouble(ctx context.Context) {
	for {
		slowBurst()
		if !sleepCtx(ctx, blockAt) {
			return
		}
		blockOnce(ctx)
		if !sleepCtx(ctx, queueRound-blockAt) {
			return
		}
	}
}

// slowBurst registers burstSize finalizers that take burstEach each and
// makes their objects garbage at once.
func slowBurst() {
	for i := range burstSize {
		c := &slowConn{fd: i}
		finalizerwatch.SetFinalizer(c, func(*slowConn) { time.Sleep(burstEach) }) // marker: slow-burst
	}
	runtime.GC()
}

// blockOnce registers a finalizer that blocks the finalizer goroutine for
// blockFor (or until ctx ends, so that the demo stops promptly), and makes
// its object garbage.
func blockOnce(ctx context.Context) {
	c := &slowConn{}
	finalizerwatch.SetFinalizer(c, func(*slowConn) { // marker: blocking-finalizer
		t := time.NewTimer(blockFor)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	})
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
