package logs

import (
	"bytes"
	"log/slog"
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
	d := NewDropped(time.Minute)
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
		d.Check(l, snap(st.dropped), t0.Add(st.at))
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
