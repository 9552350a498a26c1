package logs

import (
	"context"
	"log/slog"
	"time"

	"github.com/gcprobe/probe/finalizerwatch"
)

// In the runtime build mode (finalizercheck -runtime) the probe says in a Warn line each file, network
// connection, os.Root or os.Process that the program dropped without Close
// (finalizerwatch.SiteStats.Dropped), naming the line that opened it, as
// Android's CloseGuard and Netty's ResourceLeakDetector do.

// Defaults of the dropped-without-Close log.
const (
	// DroppedCheckInterval is how often the probe looks for new
	// dropped-without-Close runs in the ledger's top sites.
	DroppedCheckInterval = 10 * time.Second
	// DroppedLogEvery is the least time between two lines for one site:
	// a line counts every drop since the site's last line.
	DroppedLogEvery = time.Minute
	// droppedTracked bounds the sites the log remembers.
	droppedTracked = 1024
)

// Dropped decides which dropped-without-Close lines to log.
type Dropped struct {
	every time.Duration
	sites map[droppedKey]droppedSite
}

type droppedKey struct {
	kind finalizerwatch.Kind
	site string
}

type droppedSite struct {
	logged uint64    // the site's Dropped count as of its last line
	at     time.Time // when that line was logged
}

// NewDropped returns a dropped-without-Close log that logs a line about
// a site at most once per every.
func NewDropped(every time.Duration) *Dropped {
	return &Dropped{every: every, sites: make(map[droppedKey]droppedSite)}
}

// Check logs, at now, one Warn line for each site of sn's top whose
// Dropped count rose since its last line, unless that line is younger
// than every.
func (d *Dropped) Check(l *slog.Logger, sn *finalizerwatch.Snapshot, now time.Time) {
	for k := range sn.Kinds {
		for i := range sn.Kinds[k].Top {
			s := &sn.Kinds[k].Top[i]
			if s.Dropped == 0 {
				continue
			}
			key := droppedKey{s.Kind, s.Site.Label()}
			st, ok := d.sites[key]
			if s.Dropped <= st.logged || (ok && now.Sub(st.at) < d.every) {
				continue
			}
			if !ok && len(d.sites) >= droppedTracked {
				continue
			}
			l.LogAttrs(context.Background(), slog.LevelWarn, "gcprobe: "+s.Resource+" dropped without Close",
				slog.String("site", s.Site.Label()),
				slog.String("resource", s.Resource),
				slog.Uint64("dropped", s.Dropped-st.logged),
				slog.Uint64("total", s.Dropped),
				slog.Uint64("outstanding", s.Outstanding),
				slog.String("fix", "close it on every path after the call at site (defer Close)"))
			d.sites[key] = droppedSite{logged: s.Dropped, at: now}
		}
	}
}
