package probe_test

import (
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"log/slog"
	"net"
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
	"github.com/gcprobe/probe/finalizertest"
	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/internal/testkit"
	"github.com/gcprobe/probe/memstats"
	"github.com/gcprobe/probe/stackcapture"
	"github.com/gcprobe/probe/tracing"
)

// rootErr returns the error probe.New returns for opt, stopping the probe
// if New accepted it.
func rootErr(t *testing.T, opt probe.Option) error {
	t.Helper()
	p, err := probe.New(probe.WithRegisterer(prometheus.NewRegistry()), opt)
	if err != nil {
		if p != nil {
			t.Errorf("probe.New returned a probe with error %v", err)
		}
		return err
	}
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	return nil
}

// leafCheck is one leaf package's constructor applied to the leaf option a
// root option forwards to.
type leafCheck struct {
	name string
	err  func() error
}

// TestOptionLimitsAreTheLeafPackages checks that each root option that sets
// something a leaf package owns accepts exactly the values that package's
// option accepts, and rejects the others with that package's error: the
// limit is defined once, in the leaf.
func TestOptionLimitsAreTheLeafPackages(t *testing.T) {
	type row struct {
		name   string
		give   any
		wantOK bool
		root   probe.Option
		leaves []leafCheck
	}
	var rows []row

	for _, d := range []time.Duration{-time.Second, 0, 1, time.Microsecond, time.Millisecond, time.Second} {
		rows = append(rows, row{
			name: "WithInterval", give: d, wantOK: d > 0,
			root: probe.WithInterval(d),
			leaves: []leafCheck{{"memstats.WithInterval", func() error {
				_, err := memstats.New(memstats.WithInterval(d))
				return err
			}}},
		})
	}
	for _, k := range []int{-1, 0, 1, probe.DefaultTopK, 1000, 1001, 1 << 20} {
		rows = append(rows, row{
			name: "WithTopK", give: k, wantOK: k >= 1,
			root: probe.WithTopK(k),
			leaves: []leafCheck{
				{"promexporter.WithTopK", func() error {
					_, err := promexporter.New(promexporter.WithTopK(k))
					return err
				}},
				{"tracing.WithTopK", func() error {
					_, err := tracing.New(tracing.WithTopK(k))
					return err
				}},
			},
		})
	}
	for _, d := range []time.Duration{-time.Millisecond, -1, 0, 1, tracing.DefaultPauseThreshold} {
		rows = append(rows, row{
			name: "WithPauseThreshold", give: d, wantOK: d >= 0,
			root: probe.WithPauseThreshold(d),
			leaves: []leafCheck{{"tracing.WithPauseThreshold", func() error {
				_, err := tracing.New(tracing.WithPauseThreshold(d))
				return err
			}}},
		})
	}
	for _, d := range []time.Duration{-time.Second, 0, 1, 999 * time.Millisecond, time.Second, time.Hour} {
		rows = append(rows, row{
			name: "WithLeakReportInterval", give: d, wantOK: d > 0,
			root: probe.WithLeakReportInterval(d),
			leaves: []leafCheck{{"tracing.WithLeakReportInterval", func() error {
				_, err := tracing.New(tracing.WithLeakReportInterval(d))
				return err
			}}},
		})
	}
	rows = append(rows, row{
		name: "WithTracerProvider", give: "nil", wantOK: false,
		root: probe.WithTracerProvider(nil),
		leaves: []leafCheck{{"tracing.WithTracerProvider", func() error {
			_, err := tracing.New(tracing.WithTracerProvider(nil))
			return err
		}}},
	})

	for _, tt := range rows {
		t.Run(fmt.Sprintf("%s(%v)", tt.name, tt.give), func(t *testing.T) {
			rerr := rootErr(t, tt.root)
			if (rerr == nil) != tt.wantOK {
				t.Errorf("probe.%s(%v): error %v, want accepted=%v", tt.name, tt.give, rerr, tt.wantOK)
			}
			for _, leaf := range tt.leaves {
				lerr := leaf.err()
				if (lerr == nil) != tt.wantOK {
					t.Errorf("%s(%v): error %v, want accepted=%v", leaf.name, tt.give, lerr, tt.wantOK)
				}
				// The root's error is the first leaf's, prefixed: no
				// message, and no limit, of its own.
				if rerr != nil && lerr != nil && leaf.name == tt.leaves[0].name && rerr.Error() != "probe: "+lerr.Error() {
					t.Errorf("probe.%s(%v): error %q, want %q", tt.name, tt.give, rerr, "probe: "+lerr.Error())
				}
			}
		})
	}
}

// TestNilOptionIsAnErrorEverywhere checks that every constructor of the
// root module that takes options rejects a nil Option with an error naming
// the package and the constructor. The nested modules' constructors
// (k8sfinalizers.New, reconciletrace.Wrap, otlpexporter.NewTracerProvider)
// are checked by their own option tests.
func TestNilOptionIsAnErrorEverywhere(t *testing.T) {
	tests := []struct {
		name string
		give func() error
		want string
	}{
		{"probe.New", func() error { _, err := probe.New(nil); return err }, "probe: New: nil Option"},
		{"probe.Start", func() error { _, err := probe.Start(nil); return err }, "probe: New: nil Option"},
		{"finalizerwatch.New", func() error { _, err := finalizerwatch.New(nil); return err }, "finalizerwatch: New: nil Option"},
		{"stackcapture.NewTable", func() error { _, err := stackcapture.NewTable(nil); return err }, "stackcapture: NewTable: nil Option"},
		{"memstats.New", func() error { _, err := memstats.New(nil); return err }, "memstats: New: nil Option"},
		{"promexporter.New", func() error { _, err := promexporter.New(nil); return err }, "promexporter: New: nil Option"},
		{"tracing.New", func() error { _, err := tracing.New(nil); return err }, "tracing: New: nil Option"},
		{"finalizertest.Find", func() error { return finalizertest.Find(nil) }, "finalizertest: Find: nil Option"},
		{"probe.WithSamplerOptions", func() error {
			_, err := probe.New(probe.WithSamplerOptions(nil))
			return err
		}, "probe: memstats: New: nil Option"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.give(); err == nil || err.Error() != tt.want {
				t.Errorf("error %v, want %q", err, tt.want)
			}
		})
	}
}

// The listener is unauthenticated: WithListenAddr takes loopback only, and
// exposing it wider takes an option that says so, which the probe warns
// about when it binds (issue 26, item 13: ":6063" and "0.0.0.0:6064" were
// accepted silently).
func TestListenAddrIsLoopbackUnlessUnauthenticated(t *testing.T) {
	tests := []struct {
		give     string
		wantErr  string // of WithListenAddr; "" accepts
		wideFail bool   // WithUnauthenticatedListenAddr refuses it too
	}{
		{give: "127.0.0.1:0"},
		{give: "127.1.2.3:6063"},
		{give: "[::1]:6063"},
		{give: "[::ffff:127.0.0.1]:6063"},
		{give: "localhost:6063"},
		{give: "LOCALHOST:http"},
		{give: ":6063", wantErr: `probe: WithListenAddr: ":6063": it listens on every interface, and the listener is unauthenticated; bind it to loopback (such as 127.0.0.1) or, to expose it on purpose, use WithUnauthenticatedListenAddr`},
		{give: "0.0.0.0:6064", wantErr: `"0.0.0.0:6064": 0.0.0.0 listens on every interface`},
		{give: "[::]:6064", wantErr: `"[::]:6064": :: listens on every interface`},
		{give: "10.0.0.5:6064", wantErr: `host "10.0.0.5" is not a loopback address`},
		{give: "example.internal:6064", wantErr: `host "example.internal" is not a loopback address`},
		{give: "", wantErr: "probe: WithListenAddr: empty address", wideFail: true},
		{give: "127.0.0.1", wantErr: "missing port in address", wideFail: true},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			err := rootErr(t, probe.WithListenAddr(tt.give))
			if tt.wantErr == "" && err != nil {
				t.Errorf("WithListenAddr(%q): %v, want accepted", tt.give, err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("WithListenAddr(%q): %v, want an error containing %q", tt.give, err, tt.wantErr)
			}
			err = rootErr(t, probe.WithUnauthenticatedListenAddr(tt.give))
			if tt.wideFail != (err != nil) {
				t.Errorf("WithUnauthenticatedListenAddr(%q): %v, want error: %v", tt.give, err, tt.wideFail)
			}
			if err != nil && !strings.HasPrefix(err.Error(), "probe: WithUnauthenticatedListenAddr: ") {
				t.Errorf("WithUnauthenticatedListenAddr(%q): %v, want it named", tt.give, err)
			}
		})
	}

	// What each option does once the listener is bound. The test binds
	// loopback only; CheckBound sees what a wider bind would show.
	wide := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 5), Port: 6064}
	for _, tt := range []struct {
		name     string
		give     probe.Option
		wantErr  bool
		wantWarn bool
	}{
		{name: "loopback option, bound wide", give: probe.WithListenAddr("localhost:0"), wantErr: true},
		{name: "unauthenticated option, bound wide", give: probe.WithUnauthenticatedListenAddr(":0"), wantWarn: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var logs testkit.SyncBuffer
			p, err := probe.New(probe.WithRegisterer(prometheus.NewRegistry()), tt.give,
				probe.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
			if err != nil {
				t.Fatal(err)
			}
			defer p.Stop()
			err = p.CheckBound(wide)
			if tt.wantErr != (err != nil) {
				t.Errorf("bound to %v: %v, want error: %v", wide, err, tt.wantErr)
			}
			warned := strings.Contains(logs.String(), "level=WARN") && strings.Contains(logs.String(), "unauthenticated") && strings.Contains(logs.String(), "10.0.0.5:6064")
			if warned != tt.wantWarn {
				t.Errorf("bound to %v: log %q, want a warning naming the address: %v", wide, logs.String(), tt.wantWarn)
			}
		})
	}

	// Bound to loopback for real, either option serves, without warning.
	for _, give := range []probe.Option{probe.WithListenAddr("localhost:0"), probe.WithUnauthenticatedListenAddr("127.0.0.1:0")} {
		var logs testkit.SyncBuffer
		p, err := probe.Start(probe.WithRegisterer(prometheus.NewRegistry()), give,
			probe.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		if err != nil {
			t.Fatal(err)
		}
		ta, ok := p.Addr().(*net.TCPAddr)
		if !ok || !ta.IP.IsLoopback() {
			t.Errorf("listener bound to %v, want loopback", p.Addr())
		}
		if err := p.Stop(); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(logs.String(), "unauthenticated") {
			t.Errorf("loopback listener warned: %q", logs.String())
		}
	}
}

func TestWithLookThroughRefusesBadNames(t *testing.T) {
	for _, n := range []string{"", "a b"} {
		_, err := probe.New(probe.WithRegisterer(prometheus.NewRegistry()), probe.WithLookThrough(n))
		if err == nil || !strings.Contains(err.Error(), "WithLookThrough") {
			t.Errorf("WithLookThrough(%q): %v, want an error naming it", n, err)
		}
	}
}

func TestWithSuspectAgeRefusesBadValues(t *testing.T) {
	for _, d := range []time.Duration{-time.Second, 2 * time.Hour} {
		_, err := probe.New(probe.WithRegisterer(prometheus.NewRegistry()), probe.WithSuspectAge(d))
		if err == nil || !strings.Contains(err.Error(), "WithSuspectAge") {
			t.Errorf("WithSuspectAge(%v): %v, want an error naming it", d, err)
		}
	}
}

// Whatever the option values, New returns a probe or an error naming the
// option (the root's, or the package's it forwards to); it never panics.
func FuzzOptions(f *testing.F) {
	f.Add(int64(time.Second), 10, "127.0.0.1:0")
	f.Add(int64(0), 0, "")
	f.Add(int64(-1), -5, ":::")
	f.Add(int64(time.Millisecond), 1000, "localhost:http")
	f.Fuzz(func(t *testing.T, interval int64, topK int, addr string) {
		p, err := probe.New(
			probe.WithRegisterer(prometheus.NewRegistry()),
			probe.WithInterval(time.Duration(interval)),
			probe.WithTopK(topK),
			probe.WithListenAddr(addr),
		)
		if err != nil {
			if p != nil || !strings.HasPrefix(err.Error(), "probe: ") || !strings.Contains(err.Error(), ": With") {
				t.Fatalf("New: %v, %q", p, err)
			}
			return
		}
		if p == nil {
			t.Fatal("New returned neither a probe nor an error")
		}
		// New does not listen: only Start does.
		if err := p.Stop(); err != nil {
			t.Fatal(err)
		}
	})
}

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
