package page

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/stackcapture"
)

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
			if got := DroppedWords(&s); got != tt.want {
				t.Errorf("DroppedWords = %q, want %q", got, tt.want)
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
	got := SiteOf(&file, 3)
	want := Site{Kind: "finalizer", Site: "example.com/app/fileserver.(*Server).serve /src/app/internal/fileserver/staticfiles.go:613",
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
	if g := SiteOf(&leak, 3); g.Verdict != "growing" || g.Class != "growing" || g.Words != "" || len(g.Suspects) != 3 || g.Registered != 100 {
		t.Errorf("growing site's row %+v", g)
	}
	// In the JSON, as the page reads it.
	b, err := json.Marshal(SiteOf(&file, 0))
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
	if got := Words(&s); got != s.Leak {
		t.Errorf("Words = %q, want %q", got, s.Leak)
	}
	s.Counts = finalizerwatch.Counts{Executed: 2, Dropped: 2}
	if got, want := Words(&s), DroppedWords(&s); got != want {
		t.Errorf("Words of a dropped site = %q, want the dropped sentence %q", got, want)
	}
}
