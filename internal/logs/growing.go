// Package logs decides and writes the probe's own log lines: a site
// turning growing (and stopping), a file or connection dropped without
// Close, a detector firing or clearing. Each log is fed the probe's one
// read (the root package's per-cycle loop) or the sampler's events, and
// writes through the probe's logger at Warn; each is bounded and
// rate-limited, so that a paged SRE gets a line they can fix and silence
// when nothing is wrong.
package logs

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/internal/sitekey"
	"github.com/gcprobe/probe/stackcapture"
)

// A program without Prometheus still hears of a leak: the probe logs, at
// Warn through its logger (WithLogger, else slog's default), a line when
// a site turns growing (the growth model's ClassGrowing: its suspects keep
// reaching new highs) and a line when it stops growing, naming the site
// and the evidence: "+433 suspects over 4 cycles". The lines are decided
// on each of the probe's per-cycle reads of the ledger (cycles.go).
//
// An SRE paged by these lines wants a line they can fix, and silence when
// nothing is wrong:
//   - Nothing is logged while it is too early to tell a leak from a cache
//     (the Report says so: Snapshot.MoreCyclesNeeded, MoreTimeNeeded).
//   - A growing line needs the site's suspects to have risen by at least
//     GrowingLogMin over the model's window: a few stragglers are not a
//     leak worth a page.
//   - One line per transition: a site that stays growing is not logged
//     again. A site logged growing that turns stable or churn is
//     retracted at once; a site logs at most one growing line per
//     GrowingLogEvery, so one that flaps (growing, stable, growing within
//     a minute) logs its next growing line only when the minute is up,
//     if it is growing then.

// Defaults of the growing-site log.
const (
	// GrowingLogEvery is the least time between two growing lines about
	// one site.
	GrowingLogEvery = time.Minute
	// GrowingLogMin is the least growth, in suspects over the growth
	// model's window, that a growing line is logged for.
	GrowingLogMin = 5
	// growingTracked bounds the sites the log remembers; a site beyond
	// it is not logged.
	growingTracked = 1024
	// growingLinesPerCheck bounds the lines one check logs; the sites it
	// did not log stay unlogged and are logged by later checks.
	growingLinesPerCheck = 8
)

// Growing decides which growing-site lines to log.
type Growing struct {
	every time.Duration
	sites map[sitekey.Key]growingSite
}

type growingSite struct {
	growing bool      // what the site's last line said
	grewAt  time.Time // when its last growing line was logged
}

// NewGrowing returns a growing-site log that logs a growing line about
// a site at most once per every.
func NewGrowing(every time.Duration) *Growing {
	return &Growing{every: every, sites: make(map[sitekey.Key]growingSite)}
}

// Check logs, at now, a line for each site whose growing state differs
// from what its last line said (a site never logged was not growing),
// within the rules above. It reads the top sites of sn; a growing site
// that has left the top is taken to have stopped growing only when every
// growing site of its kind is in the top (KindSnapshot.Growing), since
// growing sites rank first.
func (g *Growing) Check(l *slog.Logger, sn *finalizerwatch.Snapshot, now time.Time) {
	if sn.MoreCyclesNeeded > 0 || sn.MoreTimeNeeded > 0 {
		return // too early: the Report says so, and the log is silent
	}
	lines := 0
	for k := range sn.Kinds {
		ks := &sn.Kinds[k]
		shown := 0
		for i := range ks.Top {
			s := &ks.Top[i]
			growing := s.Class == finalizerwatch.ClassGrowing
			if growing {
				shown++
			}
			key := sitekey.Of(s)
			st, ok := g.sites[key]
			switch {
			case st.growing == growing, lines == growingLinesPerCheck:
				continue
			case growing && (s.Growth < GrowingLogMin || (ok && now.Sub(st.grewAt) < g.every)):
				continue
			case !ok && len(g.sites) >= growingTracked:
				continue
			}
			lines++
			logGrowing(l, s, growing)
			st.growing = growing
			if growing {
				st.grewAt = now
			}
			g.sites[key] = st
		}
		if shown < ks.Growing {
			continue // some growing site is beyond the top: absence says nothing
		}
		// Every growing site of the kind is in the top: a site logged
		// growing that is not there has stopped.
		for key, st := range g.sites {
			if !st.growing || key.Kind != finalizerwatch.Kind(k) || lines == growingLinesPerCheck {
				continue
			}
			if inTop(ks.Top, key) {
				continue
			}
			lines++
			logStopped(l, key)
			st.growing = false
			g.sites[key] = st
		}
	}
}

func inTop(top []finalizerwatch.SiteStats, key sitekey.Key) bool {
	for i := range top {
		if sitekey.Of(&top[i]) == key {
			return true
		}
	}
	return false
}

// logGrowing logs that s turned growing (or stopped).
func logGrowing(l *slog.Logger, s *finalizerwatch.SiteStats, growing bool) {
	if growing {
		l.LogAttrs(context.Background(), slog.LevelWarn, "gcprobe: site growing: a likely leak",
			slog.String("site", s.Site.Label()),
			slog.String("kind", s.Kind.String()),
			slog.String("evidence", fmt.Sprintf("+%d suspects over %d cycles", s.Growth, finalizerwatch.GrowthWindow)),
			slog.Uint64("suspect", s.Suspect),
			slog.Uint64("outstanding", s.Outstanding),
			slog.Uint64("registered", s.Registered),
			slog.Uint64("executed", s.Executed))
		return
	}
	l.LogAttrs(context.Background(), slog.LevelWarn, "gcprobe: site stopped growing",
		slog.String("site", s.Site.Label()),
		slog.String("kind", s.Kind.String()),
		slog.String("class", s.Class.String()),
		slog.String("evidence", fmt.Sprintf("%d suspects, no new high over %d cycles", s.Suspect, finalizerwatch.GrowthWindow)),
		slog.Uint64("outstanding", s.Outstanding))
}

// logStopped logs that the site of key, logged growing, has left the top
// while every growing site of its kind is in it.
func logStopped(l *slog.Logger, key sitekey.Key) {
	site := stackcapture.Frame{Function: key.Function, File: key.File, Line: key.Line}
	l.LogAttrs(context.Background(), slog.LevelWarn, "gcprobe: site stopped growing",
		slog.String("site", site.Label()),
		slog.String("kind", key.Kind.String()),
		slog.String("evidence", "no longer among the top sites, and every growing site is"))
}
