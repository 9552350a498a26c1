package probe

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/stackcapture"
)

// TestDroppedLogOncePerRiseRateLimited drives the dropped-without-Close log
// on an injected clock: a line when a site's Dropped count rises, naming
// the site and what was dropped since the last line, none while it holds,
// at most one per DroppedLogEvery however often it rises, and none for a
// site that drops nothing.
func TestDroppedLogOncePerRiseRateLimited(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewTextHandler(&buf, nil))
	d := newDroppedLog(time.Minute)
	site := stackcapture.Frame{Function: "main.main", File: "/src/main.go", Line: 34}
	quiet := stackcapture.Frame{Function: "main.keep", File: "/src/main.go", Line: 38}
	snap := func(dropped uint64) *finalizerwatch.Snapshot {
		var sn finalizerwatch.Snapshot
		sn.Kinds[finalizerwatch.KindFinalizer].Top = []finalizerwatch.SiteStats{
			{Kind: finalizerwatch.KindFinalizer, Site: site, Resource: "os.File", Counts: finalizerwatch.Counts{Executed: dropped, Dropped: dropped}},
			{Kind: finalizerwatch.KindFinalizer, Site: quiet, Resource: "os.File", Counts: finalizerwatch.Counts{Outstanding: 5}},
		}
		return &sn
	}
	t0 := time.Unix(1000, 0)
	lines := func() []string {
		s := strings.TrimSpace(buf.String())
		buf.Reset()
		if s == "" {
			return nil
		}
		return strings.Split(s, "\n")
	}
	steps := []struct {
		name    string
		dropped uint64
		at      time.Duration
		want    string // a substring of the one line wanted, "" for none
	}{
		{"first drops", 20, 0, "dropped=20 total=20"},
		{"no change", 20, 10 * time.Second, ""},
		{"rise inside the minute", 25, 20 * time.Second, ""},
		{"rise after the minute counts both", 30, 61 * time.Second, "dropped=10 total=30"},
		{"no rise after another minute", 30, 3 * time.Minute, ""},
	}
	for _, st := range steps {
		d.check(l, snap(st.dropped), t0.Add(st.at))
		got := lines()
		switch {
		case st.want == "" && len(got) != 0:
			t.Errorf("%s: logged %q, want nothing", st.name, got)
		case st.want != "" && (len(got) != 1 || !strings.Contains(got[0], st.want)):
			t.Errorf("%s: logged %q, want one line with %q", st.name, got, st.want)
		case st.want != "":
			for _, w := range []string{"level=WARN", "os.File dropped without Close", "site=\"main.main /src/main.go:34\"", "resource=os.File"} {
				if !strings.Contains(got[0], w) {
					t.Errorf("%s: line %q lacks %q", st.name, got[0], w)
				}
			}
		}
	}
}

// TestReportSaysDropped checks the Report's words for a dropped site: a
// leak, in its class column and in a sentence after the table that gives
// its whole label, as the page does.
func TestReportSaysDropped(t *testing.T) {
	r := Report{
		RuntimeMode: true,
		Top: []finalizerwatch.SiteStats{{Kind: finalizerwatch.KindFinalizer, Resource: "os.File",
			Site: stackcapture.Frame{Function: "main.main", File: "/src/main.go", Line: 34}, Counts: finalizerwatch.Counts{Registered: 20, Executed: 20, Dropped: 20}}},
		Finalizers: finalizerwatch.Totals{Kind: finalizerwatch.KindFinalizer, Counts: finalizerwatch.Counts{Registered: 25, Executed: 25, Dropped: 23}},
	}
	s := r.String()
	for _, w := range []string{
		"runtime build mode: every registration in the binary is counted",
		"main.main main.go:34 (os.File)  finalizer  dropped ",
		"\nleak at main.main /src/main.go:34: 20 files dropped without Close, each held open until the GC found it: close them where they are opened, on every path (defer f.Close())\n",
		"\nand 3 more dropped without Close at sites outside the top 1 (WithTopK shows more)\n",
	} {
		if !strings.Contains(s, w) {
			t.Errorf("report lacks %q:\n%s", w, s)
		}
	}
	if strings.Contains(s, "churn") {
		t.Errorf("a dropped site reads as churn:\n%s", s)
	}
}

// TestDroppedWords: the sentence for each resource finalizerwatch counts
// as dropped, for one and for several, and none for a site that dropped
// nothing.
func TestDroppedWords(t *testing.T) {
	tests := []struct {
		name     string
		resource string
		dropped  uint64
		want     string
	}{
		{"nothing dropped", "os.File", 0, ""},
		{"one file", "os.File", 1, "1 file dropped without Close, held open until the GC found it: close it where it is opened, on every path (defer f.Close())"},
		{"files", "os.File", 287000, "287000 files dropped without Close, each held open until the GC found it: close them where they are opened, on every path (defer f.Close())"},
		{"connections", "net.Conn", 4, "4 network connections dropped without Close, each held open until the GC found it: close them where they are dialed or accepted, on every path (an HTTP response's Body too)"},
		{"HTTP client connections", "net.Conn (HTTP client)", 3, "3 HTTP client connections dropped without Close, each held open until the GC found it: close the responses' Bodies on every path (defer resp.Body.Close())"},
		{"a listener", "net.Listener", 1, "1 listener dropped without Close, held open until the GC found it: close it where it is created"},
		{"packet connections", "net.PacketConn", 2, "2 packet connections dropped without Close, each held open until the GC found it: close them where they are created"},
		{"roots", "os.Root", 3, "3 os.Roots dropped without Close, each held open until the GC found it: close them where they are opened, on every path"},
		{"processes", "os.Process", 2, "2 process handles neither waited for nor released, each held until the GC found it: call Wait or Release on each where they are started"},
		{"a resource this table does not know", "os.Thing", 2, "2 os.Things dropped without Close, each held open until the GC found it: close them where they are created"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := finalizerwatch.SiteStats{Resource: tt.resource, Counts: finalizerwatch.Counts{Executed: tt.dropped, Dropped: tt.dropped}}
			if got := droppedWords(&s); got != tt.want {
				t.Errorf("droppedWords = %q, want %q", got, tt.want)
			}
		})
	}
}

// Every resource finalizerwatch counts as dropped has words of its own.
func TestDroppedNounsKnowEveryResource(t *testing.T) {
	for _, name := range []string{"os.File", "net.Conn", "net.Conn (HTTP client)", "net.Conn (accepted)", "net.Listener", "net.PacketConn", "os.Root", "os.Process"} {
		if _, ok := droppedNouns[name]; !ok {
			t.Errorf("no words for %s", name)
		}
	}
}

// TestPageSiteDropped: the page's row of a dropped site (churn to the
// growth model) says dropped, with the Report's sentence; a growing site
// that dropped nothing keeps its class and has no sentence.
func TestPageSiteDropped(t *testing.T) {
	file := finalizerwatch.SiteStats{Kind: finalizerwatch.KindFinalizer, Resource: "os.File", Class: finalizerwatch.ClassChurn,
		Site:   stackcapture.Frame{Function: "example.com/app/fileserver.(*Server).serve", File: "/src/app/internal/fileserver/staticfiles.go", Line: 613},
		Counts: finalizerwatch.Counts{Registered: 287000, Executed: 286990, Dropped: 286990, Outstanding: 10}}
	leak := finalizerwatch.SiteStats{Kind: finalizerwatch.KindCleanup, Class: finalizerwatch.ClassGrowing, Growth: 40,
		Site:   stackcapture.Frame{Function: "example.com/app.sessions", File: "/src/app/main.go", Line: 10},
		Counts: finalizerwatch.Counts{Registered: 100, Outstanding: 100}, Suspect: 60}
	got := pageSite(&file, 3)
	want := PageSite{Kind: "finalizer", Site: "example.com/app/fileserver.(*Server).serve /src/app/internal/fileserver/staticfiles.go:613",
		Function: file.Site.Function, File: file.Site.File, Line: 613, Resource: "os.File", Class: "churn", Verdict: "dropped",
		Words:      "286990 files dropped without Close, each held open until the GC found it: close them where they are opened, on every path (defer f.Close())",
		Registered: 287000, Executed: 286990, Outstanding: 10, Dropped: 286990}
	for i, c := range finalizerwatch.Counters() {
		if len(got.Counts) != finalizerwatch.NumCounters || got.Counts[i] != c.Value(&file.Counts) {
			t.Fatalf("dropped site's counts %v, want %s %d at %d", got.Counts, c.Name, c.Value(&file.Counts), i)
		}
	}
	if got.Suspects, got.Stack, got.Counts = nil, nil, nil; !reflect.DeepEqual(got, want) {
		t.Errorf("dropped site's row\n%+v, want\n%+v", got, want)
	}
	if g := pageSite(&leak, 3); g.Verdict != "growing" || g.Class != "growing" || g.Words != "" || len(g.Suspects) != 3 || g.Registered != 100 {
		t.Errorf("growing site's row %+v", g)
	}
	// In the JSON, as the page reads it.
	b, err := json.Marshal(pageSite(&file, 0))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{`"class":"churn"`, `"verdict":"dropped"`, `"words":"286990 files dropped without Close`, `"registered":287000`, `"dropped":286990`} {
		if !bytes.Contains(b, []byte(w)) {
			t.Errorf("JSON %s lacks %s", b, w)
		}
	}
}

// TestSiteWordsSaysWhatAGrowingSiteLeaks: the page's sentence of a site
// that dropped nothing is what it leaks where its resource tells it.
func TestSiteWordsSaysWhatAGrowingSiteLeaks(t *testing.T) {
	s := finalizerwatch.SiteStats{Resource: "net.Conn (HTTP client)", Class: finalizerwatch.ClassGrowing,
		Leak: "HTTP response body not closed (each open body holds its connection)"}
	if got := siteWords(&s); got != s.Leak {
		t.Errorf("siteWords = %q, want %q", got, s.Leak)
	}
	s.Counts = finalizerwatch.Counts{Executed: 2, Dropped: 2}
	if got, want := siteWords(&s), droppedWords(&s); got != want {
		t.Errorf("siteWords of a dropped site = %q, want the dropped sentence %q", got, want)
	}
}
