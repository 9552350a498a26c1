package probe

import (
	"time"

	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/internal/gcclock"
	"github.com/gcprobe/probe/memstats"
)

// The per-cycle loop: once per GC cycle (woken by the process's GC-cycle
// clock, the one the ledger ages by) and at least every cyclePoll, the
// probe reads the ledger once (readCycle) and hands the read to the
// growing-site log (growing.go) and the live page's history (history.go).
// The wake-up costs the finalizer goroutine a non-blocking send; the
// read, O(K) once the cycle's ranking is made, runs on the probe's own
// goroutine.

// cyclePoll is the longest the loop waits without a wake-up from the
// clock: a program that allocates little runs few GC cycles, and a
// rate-limited line still comes due.
const cyclePoll = time.Second

// cycleWaker wakes the per-cycle loop on every tick of the GC-cycle clock.
type cycleWaker struct{ wake chan struct{} }

// Tick runs on the finalizer or a cleanup goroutine: a non-blocking send;
// a wake-up already pending covers this tick too.
func (c cycleWaker) Tick(gcclock.Kind) bool {
	select {
	case c.wake <- struct{}{}:
	default:
	}
	return true
}

// cycleReader holds what the per-cycle loop reuses from one read to the
// next, so that a read allocates nothing in the steady state.
type cycleReader struct {
	sn finalizerwatch.Snapshot
	ms memstats.Snapshot
}

// readCycle is the loop's one read of the ledger and the sampler: the top
// sites of each kind by the leak model, with their stacks (symbolized
// once per stack), from the ranking of the current GC cycle, and the
// sampler's latest round.
func (p *Probe) readCycle(r *cycleReader) {
	p.watcher.Read(&r.sn, finalizerwatch.ReadOptions{TopK: p.cfg.topK, Stacks: true})
	p.sampler.SnapshotInto(&r.ms)
}

// startCycleLoop starts the per-cycle loop on a goroutine that Stop ends.
func (p *Probe) startCycleLoop() {
	grow := newGrowingLog(GrowingLogEvery)
	p.goSafe("cycle loop", func() {
		// Detector events go to the page's history as they happen.
		defer p.sampler.Subscribe(p.history.event)()
		w := cycleWaker{make(chan struct{}, 1)}
		sub := gcclock.Subscribe(w)
		defer sub.Cancel()
		t := time.NewTicker(cyclePoll)
		defer t.Stop()
		var r cycleReader
		for {
			select {
			case <-p.life.Done():
				return
			case <-w.wake:
			case <-t.C:
			}
			p.readCycle(&r)
			grow.check(p.eventLogger(), &r.sn, time.Now())
			p.history.record(&r.sn, &r.ms)
		}
	})
}
