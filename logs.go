package probe

import (
	"errors"
	"log/slog"
	"sync/atomic"

	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/internal/logs"
	"github.com/gcprobe/probe/memstats"
)

// The probe's own log lines, through its logger (WithLogger, else slog's
// default), at Warn: internal/logs decides and writes them; the probe
// feeds them. A site turning growing or stopping, and in the runtime build
// mode a file or connection dropped without Close, are judged on the
// per-cycle loop's read (cycles.go); detector events as the sampler
// sends them (startEventLog).

// Defaults of the growing-site log: a program without Prometheus still
// hears of a leak, one line when a site turns growing (the growth model's
// ClassGrowing: its suspects keep reaching new highs) and one when it
// stops, naming the site and the evidence ("+433 suspects over 4
// cycles"); nothing while it is too early to tell a leak from a cache.
const (
	// GrowingLogEvery is the least time between two growing lines about
	// one site.
	GrowingLogEvery = logs.GrowingLogEvery // time.Minute
	// GrowingLogMin is the least growth, in suspects over the growth
	// model's window, that a growing line is logged for.
	GrowingLogMin = logs.GrowingLogMin // 5
)

// In the runtime build mode (finalizercheck -runtime) the probe attaches
// the runtime to its watcher, and says in a Warn line each file, network
// connection, os.Root or os.Process that the program dropped without Close
// (finalizerwatch.SiteStats.Dropped), naming the line that opened it, as
// Android's CloseGuard and Netty's ResourceLeakDetector do.

// Defaults of the dropped-without-Close log.
const (
	// DroppedCheckInterval is how often the probe looks for new
	// dropped-without-Close runs in the ledger's top sites.
	DroppedCheckInterval = logs.DroppedCheckInterval // 10 * time.Second
	// DroppedLogEvery is the least time between two lines for one site:
	// a line counts every drop since the site's last line.
	DroppedLogEvery = logs.DroppedLogEvery // time.Minute
)

// eventLogCap bounds the detector events waiting to be logged. Detectors
// change state a few times a minute at most; past this many pending,
// events are dropped and counted rather than holding up the sampler.
const eventLogCap = 64

// eventLog hands detector events from the sampler's goroutine to a
// goroutine of the probe's that logs them: a slow slog handler (one that
// writes to the network, say) delays nobody else.
type eventLog struct {
	ch      chan memstats.Event
	dropped atomic.Uint64
	cancel  func()
}

// logger returns where detector events go: the WithLogger logger, else
// slog's default one, read when the event is logged so that a program
// that sets it after starting the probe is obeyed.
func (p *Probe) eventLogger() *slog.Logger {
	if p.cfg.loggerSet {
		return p.cfg.logger
	}
	return slog.Default()
}

// startEventLog subscribes to the sampler's events and logs each one, at
// Warn, on a goroutine that Stop ends.
func (p *Probe) startEventLog() {
	l := &eventLog{ch: make(chan memstats.Event, eventLogCap)}
	l.cancel = p.sampler.Subscribe(func(e memstats.Event) {
		select {
		case l.ch <- e:
		default:
			l.dropped.Add(1)
		}
	})
	p.goSafe("detector log", func() {
		defer l.cancel()
		for {
			select {
			case <-p.life.Done():
				return
			case e := <-l.ch:
				logs.Event(p.eventLogger(), e, p.causeLine(e), l.dropped.Swap(0))
			}
		}
	})
}

// attachRuntime attaches the runtime build mode's hooks to the probe's
// watcher when the binary has them; the per-cycle loop then keeps the
// dropped-without-Close log (cycles.go). Another watcher already attached is logged, not an error: the
// probe still runs on its drop-in ledger.
func (p *Probe) attachRuntime() {
	detach, err := p.watcher.AttachRuntime()
	switch {
	case errors.Is(err, finalizerwatch.ErrNoRuntimeMode):
		return
	case err != nil && !finalizerwatch.RuntimeMode():
		// Built with the mode's tag, against a runtime that another
		// gcprobe version patched: its hooks are not ours to read.
		p.eventLogger().Error("gcprobe: runtime build mode off: the runtime's hooks do not match this gcprobe; nothing outside finalizerwatch's drop-in is counted", "err", err)
		return
	case err != nil:
		p.eventLogger().Warn("gcprobe: runtime build mode not attached", "err", err)
		return
	}
	p.detach = detach
}
