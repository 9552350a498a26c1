package probe_test

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/gcprobe/probe"
	promexporter "github.com/gcprobe/probe/exporters/prometheus"
	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/tracing"
)

// TestOneTopKDefault: a reader's top K has one default,
// finalizerwatch.DefaultTopK; the packages that export a DefaultTopK of
// their own (API) name that constant. heapprofile's is its own on purpose
// (its lists rank other sites; see its package documentation). A second
// default written as a value anywhere else in the repository fails here.
func TestOneTopKDefault(t *testing.T) {
	for name, v := range map[string]int{
		"probe.DefaultTopK":        probe.DefaultTopK,
		"promexporter.DefaultTopK": promexporter.DefaultTopK,
		"tracing.DefaultTopK":      tracing.DefaultTopK,
	} {
		if v != finalizerwatch.DefaultTopK {
			t.Errorf("%s = %d, want finalizerwatch.DefaultTopK (%d)", name, v, finalizerwatch.DefaultTopK)
		}
	}
	// Where a DefaultTopK may be given a value rather than name another.
	owners := map[string]bool{"finalizerwatch": true, "heapprofile": true}
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != "." && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if name.Name != "DefaultTopK" || i >= len(vs.Values) {
						continue
					}
					if _, named := vs.Values[i].(*ast.SelectorExpr); !named && !owners[filepath.Base(filepath.Dir(path))] {
						t.Errorf("%s: a DefaultTopK of its own; name finalizerwatch.DefaultTopK instead", fset.Position(name.Pos()))
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// topKObj is what TestProbeShowsWhatReadReturns registers.
type topKObj struct {
	p *int
	_ [48]byte
}

var topKKept []*topKObj

// topKSites register o with w, each from a line of its own: a finalizer at
// even indices, a cleanup at odd ones.
var topKSites = [...]func(w *finalizerwatch.Watcher, o *topKObj){
	func(w *finalizerwatch.Watcher, o *topKObj) { w.SetFinalizer(o, func(*topKObj) {}) },
	func(w *finalizerwatch.Watcher, o *topKObj) { finalizerwatch.AddCleanupTo(w, o, func(int) {}, 0) },
	func(w *finalizerwatch.Watcher, o *topKObj) { w.SetFinalizer(o, func(*topKObj) {}) },
	func(w *finalizerwatch.Watcher, o *topKObj) { finalizerwatch.AddCleanupTo(w, o, func(int) {}, 0) },
	func(w *finalizerwatch.Watcher, o *topKObj) { w.SetFinalizer(o, func(*topKObj) {}) },
	func(w *finalizerwatch.Watcher, o *topKObj) { finalizerwatch.AddCleanupTo(w, o, func(int) {}, 0) },
	func(w *finalizerwatch.Watcher, o *topKObj) { w.SetFinalizer(o, func(*topKObj) {}) },
	func(w *finalizerwatch.Watcher, o *topKObj) { finalizerwatch.AddCleanupTo(w, o, func(int) {}, 0) },
}

// TestProbeShowsWhatReadReturns: the K set on the probe is the K of every
// reader, and each shows the top sites a Read of K returns, as Read cut
// them: the Prometheus collector's per-site series are exactly those
// sites, the Report holds K of them, and a leak report describes at most
// K.
func TestProbeShowsWhatReadReturns(t *testing.T) {
	const k = 3
	w := newWatcher(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	reg := prometheus.NewRegistry()
	p, err := probe.Start(probe.WithRegisterer(reg), probe.WithWatcher(w), probe.WithTopK(k),
		probe.WithSuspectAge(0), probe.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	t.Cleanup(func() { topKKept = nil })
	for i, register := range topKSites {
		for range i + 1 {
			o := new(topKObj)
			register(w, o)
			topKKept = append(topKKept, o)
		}
	}

	siteSet := func(top []finalizerwatch.SiteStats) []string {
		var s []string
		for _, st := range top {
			s = append(s, st.Kind.String()+" "+st.Site.Label())
		}
		slices.Sort(s)
		return s
	}
	// The collector's read falls between two reads of the same ranking
	// (the same cycles and top): then it read that ranking too.
	var before, after finalizerwatch.Snapshot
	deadline := time.Now().Add(20 * time.Second)
	for {
		w.Read(&before, finalizerwatch.ReadOptions{TopK: k})
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		w.Read(&after, finalizerwatch.ReadOptions{TopK: k})
		want := siteSet(before.Top)
		if before.RankCycles != after.RankCycles || !slices.Equal(want, siteSet(after.Top)) {
			if time.Now().After(deadline) {
				t.Fatal("the ranking moved between every pair of reads for 20s")
			}
			continue
		}
		var got []string
		for _, f := range fams {
			if f.GetName() != "gcprobe_finalizers_registered_total" {
				continue
			}
			for _, m := range f.GetMetric() {
				var kind, site string
				for _, l := range m.GetLabel() {
					switch l.GetName() {
					case "kind":
						kind = l.GetValue()
					case "site":
						site = l.GetValue()
					}
				}
				if site != "other" {
					got = append(got, kind+" "+site)
				}
			}
		}
		slices.Sort(got)
		if len(want) != k || !slices.Equal(got, want) {
			t.Fatalf("the collector exports the sites\n%q\na Read of K=%d returns\n%q", got, k, want)
		}
		break
	}
	if r := p.Report(); len(r.Top) != k {
		t.Errorf("Report has %d top sites, want K=%d", len(r.Top), k)
	}
	p.ReportNow(context.Background())
	found := false
	for _, s := range rec.Ended() {
		if s.Name() != tracing.SpanLeakReport {
			continue
		}
		found = true
		for _, a := range s.Attributes() {
			if a.Key == "gcprobe.top_k" && a.Value.AsInt64() != k {
				t.Errorf("leak report's gcprobe.top_k = %d, want K=%d", a.Value.AsInt64(), k)
			}
		}
		if n := len(s.Events()); n > k {
			t.Errorf("leak report describes %d sites, want at most K=%d", n, k)
		}
	}
	if !found {
		t.Error("no leak report span")
	}
}
