package tracing

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/internal/ledgertest"
	"github.com/gcprobe/probe/stackcapture"

	"github.com/gcprobe/probe/internal/testkit"
)

// leakObj is big enough never to be tiny-allocated.
type leakObj struct {
	p   *int
	buf [48]byte
}

// planted keeps the planted objects reachable: their finalizers and
// cleanups can never run.
var planted []*leakObj

func plantFinalizerLeak(w *finalizerwatch.Watcher, n int) {
	for range n {
		o := &leakObj{}
		w.SetFinalizer(o, func(*leakObj) {}) // marker: finalizer-leak
		planted = append(planted, o)
	}
}

func plantCleanupLeak(w *finalizerwatch.Watcher, n int) {
	for i := range n {
		o := &leakObj{}
		finalizerwatch.AddCleanupTo(w, o, func(int) {}, i) // marker: cleanup-leak
		planted = append(planted, o)
	}
}

// churn registers finalizers on objects it drops: a healthy site.
func churn(w *finalizerwatch.Watcher, n int) {
	for range n {
		w.SetFinalizer(&leakObj{}, func(*leakObj) {}) // marker: churn
	}
}

func siteOn(w *finalizerwatch.Watcher, line int) finalizerwatch.SiteStats {
	for _, s := range ledgertest.Sites(w) {
		if s.Site.Line == line && strings.HasSuffix(s.Site.File, "leakreport_test.go") {
			return s
		}
	}
	return finalizerwatch.SiteStats{}
}

func TestLeakReportNamesPlantedLeak(t *testing.T) {
	t.Cleanup(func() { planted = nil })
	w := newWatcher(t)
	plantFinalizerLeak(w, 5)
	plantCleanupLeak(w, 3)
	churn(w, 100)
	finLine := testkit.MarkerLine(t, "leakreport_test.go", "finalizer-leak")
	clnLine := testkit.MarkerLine(t, "leakreport_test.go", "cleanup-leak")
	churnLine := testkit.MarkerLine(t, "leakreport_test.go", "churn")
	testkit.AwaitGC(t, 20*time.Second, "planted sites to become suspects and churn to drain", func() bool {
		return siteOn(w, finLine).Suspect == 5 && siteOn(w, clnLine).Suspect == 3 &&
			siteOn(w, churnLine).Executed == 100
	})

	tp, rec := newRecorder(t)
	r := newReporter(t, WithTracerProvider(tp), WithWatcher(w))
	// Ages move with GC cycles, which may run at any moment: retry until
	// the ledger the test expects and the report were read in one cycle.
	var top []finalizerwatch.SiteStats
	var cycles [2]uint64
	var more int
	for {
		cycles = [2]uint64{ledgertest.Cycles(w, finalizerwatch.KindFinalizer), ledgertest.Cycles(w, finalizerwatch.KindCleanup)}
		more = ledgertest.MoreCyclesNeeded(w)
		top = ledgertest.Top(w, DefaultTopK)
		r.ReportNow(context.Background())
		if cycles == [2]uint64{ledgertest.Cycles(w, finalizerwatch.KindFinalizer), ledgertest.Cycles(w, finalizerwatch.KindCleanup)} {
			break
		}
	}
	reports := spansNamed(rec, "gcprobe.leak_report")
	span := reports[len(reports)-1]

	wantSpan := map[string]any{
		"gcprobe.top_k":                  int64(10),
		"gcprobe.suspect_cycles":         int64(3),
		"gcprobe.sites_reported":         int64(2),
		"gcprobe.more_cycles_needed":     int64(more),
		"gcprobe.finalizers.sites":       int64(2),
		"gcprobe.finalizers.registered":  int64(105),
		"gcprobe.finalizers.executed":    int64(100),
		"gcprobe.finalizers.cleared":     int64(0),
		"gcprobe.finalizers.outstanding": int64(5),
		"gcprobe.finalizers.suspect":     int64(5),
		"gcprobe.finalizers.cycles":      int64(cycles[0]),
		"gcprobe.cleanups.sites":         int64(1),
		"gcprobe.cleanups.registered":    int64(3),
		"gcprobe.cleanups.executed":      int64(0),
		"gcprobe.cleanups.cleared":       int64(0),
		"gcprobe.cleanups.outstanding":   int64(3),
		"gcprobe.cleanups.suspect":       int64(3),
		"gcprobe.cleanups.cycles":        int64(cycles[1]),
	}
	// Every counter of the ledger is a total of each kind: those not
	// named above (cleared_outside, dropped: none here) are 0.
	for _, c := range finalizerwatch.Counters() {
		for _, p := range []string{"gcprobe.finalizers.", "gcprobe.cleanups."} {
			if _, ok := wantSpan[p+c.Name]; !ok {
				wantSpan[p+c.Name] = int64(0)
			}
		}
	}
	assertAttrs(t, "span", attrs(t, span.Attributes()), wantSpan)

	// The churn site is in Top but has nothing outstanding: no event.
	var want []map[string]any
	for _, s := range top {
		if s.Outstanding == 0 {
			continue
		}
		ev := map[string]any{
			"code.function.name":          s.Site.Function,
			"code.file.path":              s.Site.File,
			"code.line.number":            int64(s.Site.Line),
			"code.stacktrace":             FormatStack(s.Stack),
			"gcprobe.kind":                s.Kind.String(),
			"gcprobe.suspect":             int64(s.Suspect),
			"gcprobe.max_cycles_survived": int64(MaxCyclesSurvived(&s.Survived)),
			"gcprobe.class":               s.Class.String(),
			"gcprobe.growth":              int64(s.Growth),
		}
		// gcprobe.registered, .executed, .cleared, .outstanding and the
		// other counters (checked by name below).
		for _, c := range finalizerwatch.Counters() {
			ev["gcprobe."+c.Name] = int64(c.Value(&s.Counts))
		}
		want = append(want, ev)
	}
	events := span.Events()
	if len(events) != 2 || len(want) != 2 {
		t.Fatalf("%d events, %d expected from Top, want 2 of each: %v", len(events), len(want), events)
	}
	for i, e := range events {
		if e.Name != "gcprobe.site" {
			t.Errorf("event %d named %q", i, e.Name)
		}
		assertAttrs(t, "event "+strconv.Itoa(i), attrs(t, e.Attributes), want[i])
	}

	// Independently of Top: each planted line is named, with its counts.
	byKind := map[string]map[string]any{}
	for _, e := range events {
		a := attrs(t, e.Attributes)
		byKind[a["gcprobe.kind"].(string)] = a
	}
	for _, c := range []struct {
		kind, fn string
		line     int
		n        int64
	}{
		{"finalizer", "github.com/gcprobe/probe/tracing.plantFinalizerLeak", finLine, 5},
		{"cleanup", "github.com/gcprobe/probe/tracing.plantCleanupLeak", clnLine, 3},
	} {
		a := byKind[c.kind]
		if a == nil {
			t.Fatalf("no %s event", c.kind)
		}
		file, _ := a["code.file.path"].(string)
		if a["code.function.name"] != c.fn || a["code.line.number"] != int64(c.line) ||
			filepath.Base(file) != "leakreport_test.go" {
			t.Errorf("%s event names %v %v:%v, want %s leakreport_test.go:%d",
				c.kind, a["code.function.name"], file, a["code.line.number"], c.fn, c.line)
		}
		if a["gcprobe.registered"] != c.n || a["gcprobe.outstanding"] != c.n || a["gcprobe.suspect"] != c.n ||
			a["gcprobe.executed"] != int64(0) || a["gcprobe.cleared"] != int64(0) {
			t.Errorf("%s event counts: %v", c.kind, a)
		}
		if s, _ := a["gcprobe.max_cycles_survived"].(int64); s < 3 {
			t.Errorf("%s event: max_cycles_survived %d, want >= 3 (the suspect threshold)", c.kind, s)
		}
		// Planted once: a burst that stopped, classed stable (growing
		// if a GC cycle happened to split the planting in two).
		if cl := a["gcprobe.class"]; cl != "stable" && cl != "growing" {
			t.Errorf("%s event: class %v, want stable", c.kind, cl)
		}
		frame := c.fn + "\n\t" + file + ":" + strconv.Itoa(c.line) + "\n"
		if st, _ := a["code.stacktrace"].(string); !strings.Contains(st, frame) {
			t.Errorf("%s event: code.stacktrace lacks the planting frame %q:\n%s", c.kind, frame, st)
		}
	}
}

func TestLeakReportWithSampler(t *testing.T) {
	s := newSampler(t)
	s.Sample()
	tp, rec := newRecorder(t)
	r := newReporter(t, WithTracerProvider(tp), WithWatcher(newWatcher(t)), WithSampler(s), WithTopK(3))
	r.ReportNow(context.Background())
	snap := s.Snapshot()
	reports := spansNamed(rec, "gcprobe.leak_report")
	if len(reports) != 1 {
		t.Fatalf("%d leak reports, want 1", len(reports))
	}
	a := attrs(t, reports[0].Attributes())
	want := map[string]any{
		"gcprobe.top_k":                   int64(3),
		"gcprobe.sites_reported":          int64(0),
		"gcprobe.gc.cycles":               int64(snap.Cycles),
		"gcprobe.heap.live_bytes":         int64(snap.HeapLive),
		"gcprobe.finalizers.queue_length": int64(snap.Finalizers.Length),
		"gcprobe.cleanups.queue_length":   int64(snap.Cleanups.Length),
		"gcprobe.detectors.active":        []string{},
	}
	for k, v := range want {
		if !equalValue(a[k], v) {
			t.Errorf("%s = %#v, want %#v", k, a[k], v)
		}
	}
	if len(reports[0].Events()) != 0 {
		t.Errorf("an empty ledger reported %d sites", len(reports[0].Events()))
	}
}

func TestLeakReportSampledOut(t *testing.T) {
	r := newReporter(t, WithTracerProvider(noopProvider()), WithWatcher(newWatcher(t)))
	r.ReportNow(context.Background()) // must not panic or build anything
}

func TestFormatStack(t *testing.T) {
	tests := []struct {
		name string
		give []stackcapture.Frame
		want string
	}{
		{name: "empty", give: nil, want: ""},
		{
			name: "two frames",
			give: []stackcapture.Frame{
				{Function: "main.open", File: "/src/main.go", Line: 12},
				{Function: "main.main", File: "/src/main.go", Line: 30},
			},
			want: "main.open\n\t/src/main.go:12\nmain.main\n\t/src/main.go:30\n",
		},
		{
			name: "unknown function",
			give: []stackcapture.Frame{{File: "?", Line: 0}},
			want: "unknown\n\t?:0\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := FormatStack(tt.give); got != tt.want {
				t.Errorf("FormatStack = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestMaxCyclesSurvived(t *testing.T) {
	var s [finalizerwatch.AgeBuckets]uint64
	if got := MaxCyclesSurvived(&s); got != 0 {
		t.Errorf("empty: %d", got)
	}
	s[0], s[2] = 4, 1
	if got := MaxCyclesSurvived(&s); got != 2 {
		t.Errorf("ages 0 and 2: %d, want 2", got)
	}
	s[len(s)-1] = 1
	if got := MaxCyclesSurvived(&s); got != len(s)-1 {
		t.Errorf("oldest bucket: %d, want %d", got, len(s)-1)
	}
}

// A site whose files were dropped without Close gets an event though
// nothing there is outstanding (their finalizers ran), naming the resource
// and the drops; a site where everything ran or was cleared gets none.
func TestLeakReportDroppedSite(t *testing.T) {
	file := finalizerwatch.SiteStats{
		Kind:     finalizerwatch.KindFinalizer,
		Site:     stackcapture.Frame{Function: "example.com/app.load", File: "/src/app/load.go", Line: 42},
		Resource: "os.File",
		Counts:   finalizerwatch.Counts{Registered: 5, Executed: 2, Cleared: 3, Dropped: 2},
	}
	churned := finalizerwatch.SiteStats{Kind: finalizerwatch.KindFinalizer, Counts: finalizerwatch.Counts{Registered: 5, Executed: 2, Cleared: 3}}
	if !reportsSite(&file) || reportsSite(&churned) {
		t.Fatalf("reportsSite: %v for the dropped files' site, %v for the churn's; want true, false", reportsSite(&file), reportsSite(&churned))
	}
	a := map[string]any{}
	for _, kv := range siteAttributes(&file) {
		a[string(kv.Key)] = kv.Value.AsInterface()
	}
	if a["gcprobe.resource"] != "os.File" || a["gcprobe.dropped"] != int64(2) || a["gcprobe.executed"] != int64(2) ||
		a["gcprobe.outstanding"] != int64(0) || a["code.line.number"] != int64(42) {
		t.Errorf("the dropped files' event: %v", a)
	}
	for _, kv := range siteAttributes(&churned) {
		if kv.Key == "gcprobe.resource" {
			t.Errorf("a site without a resource has gcprobe.resource %q", kv.Value.AsString())
		}
	}
}

// In the runtime build mode, a file opened and dropped without Close is
// a leak report event at the line that opened it.
func TestRuntimeModeLeakReportNamesDroppedFile(t *testing.T) {
	if !finalizerwatch.RuntimeMode() {
		t.Skip("not built in the runtime build mode (scripts/runtime-mode-tests.sh runs this test in it)")
	}
	w := newWatcher(t)
	detach, err := w.AttachRuntime()
	if err != nil {
		t.Fatal(err)
	}
	defer detach()
	line := testkit.MarkerLine(t, "leakreport_test.go", "open-drop")
	openAndDrop(t)
	tp, rec := newRecorder(t)
	r := newReporter(t, WithTracerProvider(tp), WithWatcher(w))
	testkit.AwaitGC(t, 20*time.Second, "the dropped file's event", func() bool {
		r.ReportNow(context.Background())
		reports := spansNamed(rec, SpanLeakReport)
		for _, e := range reports[len(reports)-1].Events() {
			a := attrs(t, e.Attributes)
			if a["code.line.number"] == int64(line) && a["code.function.name"] == "github.com/gcprobe/probe/tracing.openAndDrop" {
				return a["gcprobe.resource"] == "os.File" && a["gcprobe.dropped"] == int64(1)
			}
		}
		return false
	})
}

//go:noinline
func openAndDrop(t *testing.T) {
	f, err := os.Open(os.Args[0]) // marker: open-drop
	if err != nil {
		t.Fatal(err)
	}
	_ = f
}

// The package documentation names the attributes of the ledger's counters
// by their pattern, at a site and summed; TestLeakReportNamesPlantedLeak
// checks that the report sets one of each per counter of
// finalizerwatch.Counters: no counter needs a line of its own here.
func TestDocListsCounters(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, attr := range []string{`gcprobe\.<counter> +each counter of finalizerwatch\.Counters`, `gcprobe\.finalizers\.<counter> +each counter of finalizerwatch\.Counters`} {
		if !regexp.MustCompile(`(?m)^//\t` + attr).Match(doc) {
			t.Errorf("doc.go's attributes lack a line matching %s", attr)
		}
	}
}
