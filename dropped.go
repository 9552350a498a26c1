package probe

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/gcprobe/probe/finalizerwatch"
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
	DroppedCheckInterval = 10 * time.Second
	// DroppedLogEvery is the least time between two lines for one site:
	// a line counts every drop since the site's last line.
	DroppedLogEvery = time.Minute
	// droppedTracked bounds the sites the log remembers.
	droppedTracked = 1024
)

// droppedLog decides which dropped-without-Close lines to log.
type droppedLog struct {
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

func newDroppedLog(every time.Duration) *droppedLog {
	return &droppedLog{every: every, sites: make(map[droppedKey]droppedSite)}
}

// check logs, at now, one Warn line for each site of sn's top whose
// Dropped count rose since its last line, unless that line is younger
// than every.
func (d *droppedLog) check(l *slog.Logger, sn *finalizerwatch.Snapshot, now time.Time) {
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

// attachRuntime attaches the runtime build mode's hooks to the probe's
// watcher when the binary has them, and starts the dropped-without-Close
// log. Another watcher already attached is logged, not an error: the
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
	d := newDroppedLog(DroppedLogEvery)
	p.goSafe("dropped log", func() {
		t := time.NewTicker(DroppedCheckInterval)
		defer t.Stop()
		var sn finalizerwatch.Snapshot
		for {
			select {
			case <-p.life.Done():
				return
			case now := <-t.C:
				p.watcher.Read(&sn, finalizerwatch.ReadOptions{TopK: p.cfg.topK})
				d.check(p.eventLogger(), &sn, now)
			}
		}
	})
}

// What the page's badge and the Report's class column say of a site, and
// the sentence they give a dropped one: one wording for both.

// verdictDropped is what the live page (PageSite.Verdict) and the Report's
// class column say of a site that dropped a file, connection, os.Root or
// os.Process without Close (SiteStats.Dropped above 0): a leak at that
// line, whatever the growth model makes of what is still outstanding
// there (a line that opens and drops files is churn to the model, as its
// finalizers run).
const verdictDropped = "dropped"

// siteVerdict returns verdictDropped for a site that dropped anything
// without Close, else its class ("growing", "stable" or "churn").
func siteVerdict(s *finalizerwatch.SiteStats) string {
	if s.Dropped > 0 {
		return verdictDropped
	}
	return s.Class.String()
}

// droppedNoun names a Resource for a person: the noun, singular and
// plural, and what to do at the line, for one and for several.
type droppedNoun struct {
	one, many      string
	fixOne, fixAll string
}

// droppedNouns are the resources that finalizerwatch counts as dropped
// (finalizerwatch.Resource's DroppedWithoutClose), by Resource name.
var droppedNouns = map[string]droppedNoun{
	"os.File": {"file", "files",
		"close it where it is opened, on every path (defer f.Close())",
		"close them where they are opened, on every path (defer f.Close())"},
	"net.Conn": {"network connection", "network connections",
		"close it where it is dialed or accepted, on every path (an HTTP response's Body too)",
		"close them where they are dialed or accepted, on every path (an HTTP response's Body too)"},
	"net.Conn (HTTP client)": {"HTTP client connection", "HTTP client connections",
		"close the response's Body on every path (defer resp.Body.Close())",
		"close the responses' Bodies on every path (defer resp.Body.Close())"},
	"net.Conn (accepted)": {"accepted connection", "accepted connections",
		"close it where it is accepted, on every path", "close them where they are accepted, on every path"},
	"net.Listener": {"listener", "listeners",
		"close it where it is created", "close them where they are created"},
	"net.PacketConn": {"packet connection", "packet connections",
		"close it where it is created", "close them where they are created"},
	"os.Root": {"os.Root", "os.Roots",
		"close it where it is opened, on every path", "close them where they are opened, on every path"},
	"os.Process": {"process handle", "process handles",
		"call Wait or Release on it where it is started", "call Wait or Release on each where they are started"},
}

// droppedWords says, in a sentence, what a site dropped without Close
// and what to do at its line ("12 files dropped without Close, each held
// open until the GC found it: close them where they are opened, on every
// path (defer f.Close())"); "" for a site that dropped nothing. The line
// itself is not in the sentence: the page shows it beside, the Report
// before.
func droppedWords(s *finalizerwatch.SiteStats) string {
	if s.Dropped == 0 {
		return ""
	}
	n, ok := droppedNouns[s.Resource]
	if !ok {
		// A resource finalizerwatch learnt to count after this table was
		// written: its own name, and the general fix.
		name := s.Resource
		if name == "" {
			name = "object"
		}
		n = droppedNoun{name, name + "s", "close it where it is created", "close them where they are created"}
	}
	noun, fix, held := n.many, n.fixAll, "each held"
	if s.Dropped == 1 {
		noun, fix, held = n.one, n.fixOne, "held"
	}
	if s.Resource == "os.Process" {
		return fmt.Sprintf("%d %s neither waited for nor released, %s until the GC found it: %s", s.Dropped, noun, held, fix)
	}
	return fmt.Sprintf("%d %s dropped without Close, %s open until the GC found it: %s", s.Dropped, noun, held, fix)
}

// siteWords is the page's sentence for a site: droppedWords at a dropped
// site, else what a growing site leaks where its resource tells it
// (SiteStats.Leak), else "".
func siteWords(s *finalizerwatch.SiteStats) string {
	if w := droppedWords(s); w != "" {
		return w
	}
	return s.Leak
}
