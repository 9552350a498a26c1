package page

import (
	"fmt"

	"github.com/gcprobe/probe/finalizerwatch"
)

// What the page's badge and the Report's class column say of a site, and
// the sentence they give a dropped one: one wording for both.

// VerdictDropped is what the live page (Site.Verdict) and the Report's
// class column say of a site that dropped a file, connection, os.Root or
// os.Process without Close (SiteStats.Dropped above 0): a leak at that
// line, whatever the growth model makes of what is still outstanding
// there (a line that opens and drops files is churn to the model, as its
// finalizers run).
const VerdictDropped = "dropped"

// Verdict returns VerdictDropped for a site that dropped anything
// without Close, else its class ("growing", "stable" or "churn").
func Verdict(s *finalizerwatch.SiteStats) string {
	if s.Dropped > 0 {
		return VerdictDropped
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

// DroppedWords says, in a sentence, what a site dropped without Close
// and what to do at its line ("12 files dropped without Close, each held
// open until the GC found it: close them where they are opened, on every
// path (defer f.Close())"); "" for a site that dropped nothing. The line
// itself is not in the sentence: the page shows it beside, the Report
// before.
func DroppedWords(s *finalizerwatch.SiteStats) string {
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

// Words is the page's sentence for a site: DroppedWords at a dropped
// site, else what a growing site leaks where its resource tells it
// (SiteStats.Leak), else "".
func Words(s *finalizerwatch.SiteStats) string {
	if w := DroppedWords(s); w != "" {
		return w
	}
	return s.Leak
}
