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

// TestGrowingLogOncePerTransition drives the growing-site log on an
// injected clock: one Warn line when a site turns growing, naming it and
// the evidence, none while it stays growing, one at once when it stops,
// at most one growing line per GrowingLogEvery for a site however often
// it flaps, none while it is too early or for growth below GrowingLogMin,
// and a stop line for a growing site that left the top once every
// growing site is in it.
func TestGrowingLogOncePerTransition(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewTextHandler(&buf, nil))
	g := NewGrowing(time.Minute)
	leak := stackcapture.Frame{Function: "main.leak", File: "/src/main.go", Line: 34}
	cache := stackcapture.Frame{Function: "main.cache", File: "/src/main.go", Line: 40}
	type site struct {
		frame  stackcapture.Frame
		class  finalizerwatch.Class
		growth uint64
	}
	snap := func(sites ...site) *finalizerwatch.Snapshot {
		var sn finalizerwatch.Snapshot
		ks := &sn.Kinds[finalizerwatch.KindFinalizer]
		for _, s := range sites {
			ks.Top = append(ks.Top, finalizerwatch.SiteStats{Kind: finalizerwatch.KindFinalizer, Site: s.frame,
				Class: s.class, Growth: s.growth, Suspect: 500, Counts: finalizerwatch.Counts{Outstanding: 600}})
			if s.class == finalizerwatch.ClassGrowing {
				ks.Growing++
			}
		}
		return &sn
	}
	lines := func() []string {
		s := strings.TrimSpace(buf.String())
		buf.Reset()
		if s == "" {
			return nil
		}
		return strings.Split(s, "\n")
	}
	growing := func(n uint64) site { return site{leak, finalizerwatch.ClassGrowing, n} }
	stable := site{leak, finalizerwatch.ClassStable, 0}
	steady := site{cache, finalizerwatch.ClassStable, 0}
	t0 := time.Unix(1000, 0)
	steps := []struct {
		name  string
		sites []site
		at    time.Duration
		want  []string // substrings of the one line wanted, nil for none
		early bool     // the snapshot says it is too early to tell
	}{
		{"churn and a cache: nothing", []site{steady}, 0, nil, false},
		{"too early: a growing site logs nothing", []site{growing(433), steady}, 0, nil, true},
		{"turns growing", []site{growing(433), steady}, time.Second,
			[]string{"level=WARN", `msg="gcprobe: site growing: a likely leak"`, `site="main.leak /src/main.go:34"`,
				`evidence="+433 suspects over 4 cycles"`, "kind=finalizer"}, false},
		{"stays growing", []site{growing(900), steady}, 2 * time.Second, nil, false},
		{"stops inside the minute: retracted at once", []site{stable, steady}, 10 * time.Second,
			[]string{"level=WARN", `msg="gcprobe: site stopped growing"`, `site="main.leak /src/main.go:34"`, "class=stable"}, false},
		{"grows again inside the minute: not yet", []site{growing(50), steady}, 30 * time.Second, nil, false},
		{"still growing, inside the minute", []site{growing(50), steady}, 50 * time.Second, nil, false},
		{"still growing, past the minute", []site{growing(60), steady}, 62 * time.Second, []string{`evidence="+60 suspects over 4 cycles"`}, false},
		{"stops", []site{stable, steady}, 70 * time.Second, []string{`msg="gcprobe: site stopped growing"`}, false},
		{"stays stopped", []site{stable, steady}, 200 * time.Second, nil, false},
		{"grows, by less than GrowingLogMin", []site{growing(GrowingLogMin - 1), steady}, 300 * time.Second, nil, false},
		{"grows more", []site{growing(12), steady}, 310 * time.Second, []string{`evidence="+12 suspects over 4 cycles"`}, false},
		{"leaves the top with no growing site beyond it", []site{steady}, 400 * time.Second,
			[]string{`msg="gcprobe: site stopped growing"`, `site="main.leak /src/main.go:34"`, "no longer among the top sites"}, false},
		{"gone for good", []site{steady}, 500 * time.Second, nil, false},
	}
	for _, st := range steps {
		sn := snap(st.sites...)
		if st.early {
			sn.MoreCyclesNeeded = 2
		}
		g.Check(l, sn, t0.Add(st.at))
		got := lines()
		switch {
		case st.want == nil && len(got) != 0:
			t.Errorf("%s: logged %q, want nothing", st.name, got)
		case st.want != nil && len(got) != 1:
			t.Errorf("%s: logged %q, want one line", st.name, got)
		case st.want != nil:
			for _, w := range st.want {
				if !strings.Contains(got[0], w) {
					t.Errorf("%s: line %q lacks %q", st.name, got[0], w)
				}
			}
		}
	}
}

// TestGrowingLogAbsenceBeyondTop: a growing site that left the top while
// another growing site is beyond it may still grow: no stop line.
func TestGrowingLogAbsenceBeyondTop(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewTextHandler(&buf, nil))
	g := NewGrowing(time.Minute)
	a := finalizerwatch.SiteStats{Kind: finalizerwatch.KindCleanup, Site: stackcapture.Frame{Function: "a", File: "/a.go", Line: 1}, Class: finalizerwatch.ClassGrowing, Growth: 5}
	b := finalizerwatch.SiteStats{Kind: finalizerwatch.KindCleanup, Site: stackcapture.Frame{Function: "b", File: "/b.go", Line: 2}, Class: finalizerwatch.ClassGrowing, Growth: 9}
	var sn finalizerwatch.Snapshot
	sn.Kinds[finalizerwatch.KindCleanup].Top = []finalizerwatch.SiteStats{a}
	sn.Kinds[finalizerwatch.KindCleanup].Growing = 2
	t0 := time.Unix(0, 0)
	g.Check(l, &sn, t0)
	if n := strings.Count(buf.String(), "site growing"); n != 1 {
		t.Fatalf("%d growing lines, want 1:\n%s", n, buf.String())
	}
	buf.Reset()
	sn.Kinds[finalizerwatch.KindCleanup].Top = []finalizerwatch.SiteStats{b} // a beyond the top, 2 growing
	g.Check(l, &sn, t0.Add(time.Hour))
	if s := buf.String(); strings.Contains(s, "stopped") || strings.Count(s, "site growing") != 1 || !strings.Contains(s, "site=\"b /b.go:2\"") {
		t.Fatalf("want one growing line for b and no stop line for a:\n%s", s)
	}
}

// TestGrowingLogBounded: one check logs at most growingLinesPerCheck
// lines; the rest come with later checks.
func TestGrowingLogBounded(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewTextHandler(&buf, nil))
	g := NewGrowing(time.Minute)
	var sn finalizerwatch.Snapshot
	ks := &sn.Kinds[finalizerwatch.KindFinalizer]
	for i := range 3 * growingLinesPerCheck {
		ks.Top = append(ks.Top, finalizerwatch.SiteStats{Kind: finalizerwatch.KindFinalizer,
			Site: stackcapture.Frame{Function: "f", File: "/f.go", Line: i + 1}, Class: finalizerwatch.ClassGrowing, Growth: GrowingLogMin})
	}
	ks.Growing = len(ks.Top)
	t0 := time.Unix(0, 0)
	for i := range 3 {
		g.Check(l, &sn, t0.Add(time.Duration(i)*time.Second))
		if n := strings.Count(buf.String(), "\n"); n != growingLinesPerCheck {
			t.Fatalf("check %d logged %d lines, want %d", i, n, growingLinesPerCheck)
		}
		buf.Reset()
	}
	g.Check(l, &sn, t0.Add(time.Hour))
	if buf.Len() != 0 {
		t.Fatalf("every site logged already, yet:\n%s", buf.String())
	}
}

// TestGrowingCheckAllocatesNothing: the growing-site log's check of each
// cycle's read, the per-cycle loop's work beside the page history's
// record (internal/page's TestRecordAllocatesNothing), allocates nothing
// once it knows the sites.
func TestGrowingCheckAllocatesNothing(t *testing.T) {
	g := NewGrowing(GrowingLogEvery)
	l := slog.New(slog.DiscardHandler)
	var sn finalizerwatch.Snapshot
	for i := range 10 {
		sn.Top = append(sn.Top, finalizerwatch.SiteStats{Kind: finalizerwatch.KindFinalizer,
			Site: stackcapture.Frame{Function: "main.f", File: "/src/main.go", Line: i + 1}, Suspect: uint64(i), Class: finalizerwatch.ClassStable})
	}
	sn.Kinds[finalizerwatch.KindFinalizer].Top = sn.Top
	now := time.Unix(0, 0)
	g.Check(l, &sn, now)
	if allocs := testing.AllocsPerRun(100, func() { g.Check(l, &sn, now) }); allocs != 0 {
		t.Fatalf("%v allocations per check, want 0", allocs)
	}
}
