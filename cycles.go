package probe

import (
	"time"

	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/internal/gcclock"
	"github.com/gcprobe/probe/internal/logs"
	"github.com/gcprobe/probe/memstats"
)

// The per-cycle loop: once per GC cycle (woken by the process's GC-cycle
// clock, the one the ledger ages by) and at least every cyclePoll, the
// probe reads the ledger once (read) and hands the read to the
// growing-site log (internal/logs), the live page's history (internal/page)
// and, in the runtime build mode, the dropped-without-Close log
// (internal/logs), every DroppedCheckInterval.
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

// reading is what the probe shows, read at one time: the narrow value
// the live page's document (page.go), the Report (report.go) and the
// per-cycle logs and history (below) are all made from. read is the one
// place that reads the ledger, the sampler and the heap profile for them,
// so that a change in their read APIs changes this function alone.
type reading struct {
	sn     finalizerwatch.Snapshot // Top, Kinds' totals, Running, MoreCyclesNeeded, Overflow
	ms     memstats.Snapshot
	firing []memstats.Event
	pauses []memstats.Pause // with readFor.pauses
	cause  GCCause          // with readFor.causes: the firing causes and the heap profile
}

// readFor says what a read is for beyond the ledger's top sites and the
// sampler's latest round.
type readFor struct {
	// fresh ranks the ledger now, for exact counts (a Report is rare),
	// rather than reading the ranking of the current GC cycle.
	fresh bool
	// stacks symbolizes the top sites' stacks (once per stack).
	stacks bool
	// causes reads the detectors firing now and names the causes of GC
	// work with their lines (gcCause).
	causes bool
	// pauses reads the runtime's pauses since cycle pausesSince.
	pauses      bool
	pausesSince uint64
}

// read fills r, reusing its slices.
func (p *Probe) read(r *reading, f readFor) {
	p.watcher.Read(&r.sn, finalizerwatch.ReadOptions{TopK: p.cfg.topK, Stacks: f.stacks, Fresh: f.fresh})
	p.sampler.SnapshotInto(&r.ms)
	r.firing = r.firing[:0]
	if f.causes {
		r.firing = p.sampler.Active(r.firing)
		r.cause = p.gcCause(r.firing)
	}
	r.pauses = r.pauses[:0]
	if f.pauses {
		r.pauses = p.sampler.PausesSince(f.pausesSince, r.pauses)
	}
}

// startCycleLoop starts the per-cycle loop on a goroutine that Stop ends.
func (p *Probe) startCycleLoop() {
	grow := logs.NewGrowing(GrowingLogEvery)
	checkDropped := p.detach != nil // the runtime build mode's hooks attached (logs.go: attachRuntime)
	p.goSafe("cycle loop", func() {
		// Detector events go to the page's history as they happen.
		defer p.sampler.Subscribe(p.history.Event)()
		w := cycleWaker{make(chan struct{}, 1)}
		sub := gcclock.Subscribe(w)
		defer sub.Cancel()
		t := time.NewTicker(cyclePoll)
		defer t.Stop()
		var r reading
		dropped, droppedAt := logs.NewDropped(DroppedLogEvery), time.Time{}
		for {
			select {
			case <-p.life.Done():
				return
			case <-w.wake:
			case <-t.C:
			}
			p.read(&r, readFor{stacks: true})
			now := time.Now()
			grow.Check(p.eventLogger(), &r.sn, now)
			p.history.Record(&r.sn, &r.ms)
			if checkDropped && now.Sub(droppedAt) >= DroppedCheckInterval {
				dropped.Check(p.eventLogger(), &r.sn, now)
				droppedAt = now
			}
		}
	})
}
