package probe

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/memstats"
)

// runningFunc is the finalizer_blocked detector's source: the watcher's
// longest-running callback. memstats may not import finalizerwatch (imports
// point down only), so the probe, which imports both, joins them here.
func runningFunc(w *finalizerwatch.Watcher) memstats.RunningFunc {
	var (
		mu sync.Mutex
		sn finalizerwatch.Snapshot // reused: no allocation per tick
	)
	return func() (memstats.Running, bool) {
		mu.Lock()
		defer mu.Unlock()
		// No top sites, and no ranking unless there is none yet: the
		// running callbacks are read live, in O(1).
		w.Read(&sn, finalizerwatch.ReadOptions{Unranked: true})
		if len(sn.Running) == 0 {
			return memstats.Running{}, false
		}
		r := sn.Running[0]
		return memstats.Running{Kind: r.Kind.String(), Site: r.Site.Label(), For: r.For}, true
	}
}

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
				logEvent(p.eventLogger(), e, p.causeLine(e), l.dropped.Swap(0))
			}
		}
	})
}

// logEvent logs one detector event: "gcprobe: detector firing" or
// "gcprobe: detector cleared", with the detector, its value and threshold,
// since when its condition held, and, for finalizer_blocked, the kind and
// site of the callback.
func logEvent(l *slog.Logger, e memstats.Event, line string, dropped uint64) {
	msg := "gcprobe: detector cleared"
	if e.Firing {
		msg = "gcprobe: detector firing"
	}
	attrs := make([]slog.Attr, 0, 8)
	attrs = append(attrs,
		slog.String("detector", e.Detector),
		slog.Float64("value", e.Value),
		slog.Float64("threshold", e.Threshold),
		slog.Time("since", e.Since),
	)
	if e.Site != "" {
		attrs = append(attrs, slog.String("kind", e.Kind), slog.String("site", e.Site))
	}
	if c := e.Cause(); c != "" && e.Firing {
		attrs = append(attrs, slog.String("cause", c))
		if e.Fix != "" {
			attrs = append(attrs, slog.String("fix", e.Fix))
		}
		if line != "" {
			attrs = append(attrs, slog.String("line", line))
		}
	}
	if !e.Since.IsZero() && !e.Time.IsZero() {
		attrs = append(attrs, slog.Duration("for", e.Time.Sub(e.Since).Round(time.Millisecond)))
	}
	if dropped > 0 {
		attrs = append(attrs, slog.Uint64("dropped", dropped))
	}
	l.LogAttrs(context.Background(), slog.LevelWarn, msg, attrs...)
}

// maxRunningLines bounds the "running now" lines of Report.WriteTo.
const maxRunningLines = 10

// writeRunning writes the callbacks running now, longest first, at most
// maxRunningLines of them.
func (r Report) writeRunning(b *bytes.Buffer) {
	for i, c := range r.Running {
		if i == maxRunningLines {
			fmt.Fprintf(b, "running now: %d more\n", len(r.Running)-i)
			break
		}
		fmt.Fprintf(b, "running now: %s %s:%d (%s) for %v\n", c.Site.Function, filepath.Base(c.Site.File), c.Site.Line,
			c.Kind, c.For.Round(time.Millisecond))
	}
}
