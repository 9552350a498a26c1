package promexporter

import (
	"bytes"
	"errors"
	"os"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"text/template"
	"time"
	"unicode/utf8"

	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/internal/ledgertest"
	"github.com/gcprobe/probe/memstats"
	"github.com/gcprobe/probe/stackcapture"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/gcprobe/probe/internal/testkit"
)

// kept holds the objects that tests leak on purpose, so that their
// finalizers and cleanups never run while the test looks.
var kept []*siteObj

func plantFinalizerLeak(w *finalizerwatch.Watcher, n int) {
	for range n {
		o := new(siteObj)
		w.SetFinalizer(o, finalizeSiteObj) // marker: finalizer-leak
		kept = append(kept, o)
	}
}

func growFinalizerLeak(w *finalizerwatch.Watcher, n int) {
	for range n {
		o := new(siteObj)
		w.SetFinalizer(o, finalizeSiteObj) // marker: finalizer-grow
		kept = append(kept, o)
	}
}

func churnFinalizers(w *finalizerwatch.Watcher, n int) {
	for range n {
		w.SetFinalizer(new(siteObj), finalizeSiteObj) // marker: finalizer-churn
	}
}

func plantCleanupLeak(w *finalizerwatch.Watcher, n int) {
	for range n {
		o := new(siteObj)
		finalizerwatch.AddCleanupTo(w, o, cleanupSiteObj, 0) // marker: cleanup-leak
		kept = append(kept, o)
	}
}

func churnCleanups(w *finalizerwatch.Watcher, n int) {
	for i := range n {
		finalizerwatch.AddCleanupTo(w, new(siteObj), cleanupSiteObj, i) // marker: cleanup-churn
	}
}

// siteLabel is the site label of a registration made by fn (a planting
// function of this file) on the line marked name.
func siteLabel(t *testing.T, fn any, name string) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	f := stackcapture.Frame{
		Function: runtime.FuncForPC(reflect.ValueOf(fn).Pointer()).Name(),
		File:     file,
		Line:     testkit.MarkerLine(t, "collector_test.go", name),
	}
	return f.String()
}

// golden renders testdata/name as a template with data.
func golden(t *testing.T, name string, data any) string {
	t.Helper()
	src, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := template.New(name).Parse(string(src))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := tmpl.Execute(&b, data); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// plantedWatcher returns a closed watcher (so that its GC clocks stand
// still) with two sites of each kind: a leak of 5 finalizers (3 cleanups)
// whose registrations are all suspects, and a churn of 100 finalizers (50
// cleanups) that have all run.
func plantedWatcher(t *testing.T) *finalizerwatch.Watcher {
	t.Helper()
	t.Cleanup(func() { kept = nil })
	w := newWatcher(t)
	plantFinalizerLeak(w, 5)
	churnFinalizers(w, 100)
	plantCleanupLeak(w, 3)
	churnCleanups(w, 50)
	testkit.AwaitGC(t, 30*time.Second, "the suspect cycles to pass", ledgertest.ClocksAdvanced(w, uint64(w.SuspectCycles())+1))
	testkit.AwaitGC(t, 30*time.Second, "the churned registrations to run", func() bool {
		return ledgertest.Totals(w, finalizerwatch.KindFinalizer).Executed == 100 &&
			ledgertest.Totals(w, finalizerwatch.KindCleanup).Executed == 50
	})
	w.Close()
	return w
}

func TestCollectSitesGolden(t *testing.T) {
	w := plantedWatcher(t)
	// K=2: the two leaks, one of each kind, outrank both churns.
	c := newCollector(t, WithWatcher(w), WithTopK(2))
	want := golden(t, "sites.golden", map[string]string{
		"FinalizerLeak": siteLabel(t, plantFinalizerLeak, "finalizer-leak"),
		"CleanupLeak":   siteLabel(t, plantCleanupLeak, "cleanup-leak"),
	})
	names := []string{
		"gcprobe_finalizers_outstanding",
		"gcprobe_finalizers_registered_total",
		"gcprobe_finalizers_executed_total",
		"gcprobe_finalizers_cleared_total",
		"gcprobe_finalizers_cleared_outside_total", // sparse: none, all 0
		"gcprobe_finalizers_suspect_objects",
		"gcprobe_finalizers_growing",
		"gcprobe_sites_tracked",
		"gcprobe_sites_overflow_total",
		"gcprobe_stacks_overflow_total",
	}
	// Twice: a second Collect with nothing new must not move "other".
	for range 2 {
		if err := testutil.CollectAndCompare(c, strings.NewReader(want), names...); err != nil {
			t.Fatal(err)
		}
	}
	// The comparison does compare: one wrong value fails it.
	wrong := strings.Replace(want, `site="other"} 100`, `site="other"} 101`, 1)
	if wrong == want {
		t.Fatal("the golden file changed: no value to alter")
	}
	if err := testutil.CollectAndCompare(c, strings.NewReader(wrong), names...); err == nil {
		t.Fatal("CollectAndCompare accepts a wrong value")
	}
	// Without WithSnapshotFunc and WithDetectors, none of their series.
	for _, name := range []string{"gcprobe_finalizer_queue_length", "gcprobe_gc_pause_seconds", "gcprobe_detector_firing", "gcprobe_finalizers_unwatched_total"} {
		if n := testutil.CollectAndCount(c, name); n != 0 {
			t.Errorf("%s: %d series without a snapshot func or detectors, want 0", name, n)
		}
	}
}

func TestCollectDurationHistogram(t *testing.T) {
	w := plantedWatcher(t)
	c := newCollector(t, WithWatcher(w), WithTopK(2))
	fams := gather(t, c)
	h := series(t, fams, "gcprobe_finalizer_duration_seconds", "finalizer", otherSite).GetHistogram()
	// One run in finalizerwatch.DurationSampleRate is timed and stands for
	// that many: the count of 100 runs is an estimate, a multiple of the
	// rate, Binomial(100, 1/8) scaled (standard deviation about 26).
	if n := h.GetSampleCount(); n%finalizerwatch.DurationSampleRate != 0 || n > 100+6*26 {
		t.Errorf("duration count of the finalizer churn = %d, want a multiple of %d near 100", n, finalizerwatch.DurationSampleRate)
	}
	var bounds []float64
	for _, b := range h.GetBucket() {
		bounds = append(bounds, b.GetUpperBound())
	}
	if want := finalizerwatch.DurationBounds(); !slices.Equal(bounds, want) {
		t.Errorf("duration buckets = %v, want %v", bounds, want)
	}
	leak := series(t, fams, "gcprobe_finalizer_duration_seconds", "cleanup", siteLabel(t, plantCleanupLeak, "cleanup-leak"))
	if n := leak.GetHistogram().GetSampleCount(); n != 0 {
		t.Errorf("duration count of the cleanup leak = %d, want 0", n)
	}
}

// fakeSnapshot is the runtime picture testdata/runtime.golden expects.
func fakeSnapshot() memstats.Snapshot {
	return memstats.Snapshot{
		ForcedCycles:  7,
		GCCPUFraction: 0.25,
		Finalizers:    memstats.Queue{Queued: 120, Executed: 100, Length: 20, Latency: 1500 * time.Millisecond},
		Cleanups:      memstats.Queue{Queued: 60, Executed: 50, Length: 10, Latency: 2 * time.Millisecond},
		PauseHistogram: memstats.Histogram{
			Bounds: []float64{0.001, 0.01},
			Counts: []uint64{3, 2, 1},
			Count:  6,
			Sum:    0.05,
		},
	}
}

func TestCollectRuntimeGolden(t *testing.T) {
	// A watcher closed before anything was registered keeps its executed
	// counts and GC cycles at 0 (its sentinels, armed by the first read of
	// its ledger, never count), so unwatched is the runtime's count less
	// what the own-callbacks function reports.
	w := newWatcher(t)
	w.Close()
	c := newCollector(t,
		WithWatcher(w),
		WithSnapshotFunc(fakeSnapshot),
		WithOwnCallbacksFunc(func(k finalizerwatch.Kind) uint64 {
			if k == finalizerwatch.KindFinalizer {
				return 4
			}
			return 0
		}),
		WithDetectors(func(yield func(string, bool) bool) {
			_ = yield("forced_gc", true) && yield("queue_latency", false) && yield("forced_gc", false)
		}),
	)
	c.cfg.sentinelRuns = func(finalizerwatch.Kind) uint64 { return 0 } // no sentinel ran
	want := golden(t, "runtime.golden", nil)
	names := []string{
		"gcprobe_finalizer_queue_length",
		"gcprobe_finalizer_queue_latency_seconds",
		"gcprobe_finalizers_queued_total",
		"gcprobe_finalizers_runtime_executed_total",
		"gcprobe_finalizers_unwatched_total",
		"gcprobe_gc_pause_seconds",
		"gcprobe_gc_forced_cycles_total",
		"gcprobe_gc_cpu_fraction",
		"gcprobe_detector_firing",
	}
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
}

func TestUnwatchedIsMonotonic(t *testing.T) {
	w := newWatcher(t)
	w.Close() // its cycles stay at 0: see TestCollectRuntimeGolden
	executed := []uint64{10, 30, 20, 25, 40}
	want := []float64{10, 30, 30, 30, 40}
	step := 0
	c := newCollector(t, WithWatcher(w), WithSnapshotFunc(func() memstats.Snapshot {
		return memstats.Snapshot{Finalizers: memstats.Queue{Executed: executed[step]}}
	}), WithOwnCallbacksFunc(func(finalizerwatch.Kind) uint64 { return 0 }))
	c.cfg.sentinelRuns = func(finalizerwatch.Kind) uint64 { return 0 } // no sentinel ran
	for step = range executed {
		got := series(t, gather(t, c), "gcprobe_finalizers_unwatched_total", "finalizer", "").GetCounter().GetValue()
		if got != want[step] {
			t.Errorf("step %d: runtime executed %d: unwatched = %v, want %v", step, executed[step], got, want[step])
		}
	}

	// More own callbacks than the runtime ran: clamped at 0.
	c = newCollector(t, WithWatcher(w), WithSnapshotFunc(func() memstats.Snapshot {
		return memstats.Snapshot{Cleanups: memstats.Queue{Executed: 3}}
	}), WithOwnCallbacksFunc(func(finalizerwatch.Kind) uint64 { return 5 }))
	c.cfg.sentinelRuns = func(finalizerwatch.Kind) uint64 { return 0 }
	if got := series(t, gather(t, c), "gcprobe_finalizers_unwatched_total", "cleanup", "").GetCounter().GetValue(); got != 0 {
		t.Errorf("unwatched with more own callbacks than runtime runs = %v, want 0", got)
	}
}

func TestUnwatchedSubtractsWatcher(t *testing.T) {
	w := plantedWatcher(t)
	// The runtime ran everything the watcher ran, the process's GC-cycle
	// sentinels (7 here), and 42 finalizers of somebody else's.
	runtimeExecuted := ledgertest.Totals(w, finalizerwatch.KindFinalizer).Executed + 7 + 42
	c := newCollector(t, WithWatcher(w), WithSnapshotFunc(func() memstats.Snapshot {
		return memstats.Snapshot{Finalizers: memstats.Queue{Executed: runtimeExecuted}}
	}))
	c.cfg.sentinelRuns = func(finalizerwatch.Kind) uint64 { return 7 }
	if got := series(t, gather(t, c), "gcprobe_finalizers_unwatched_total", "finalizer", "").GetCounter().GetValue(); got != 42 {
		t.Errorf("unwatched = %v, want 42", got)
	}
}

func TestWithSampler(t *testing.T) {
	s, err := memstats.New()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for name, firing := range samplerDetectors(s) {
		if firing {
			t.Errorf("detector %s fires on a sampler that never sampled", name)
		}
		got = append(got, name)
	}
	want := []string{memstats.DetectorQueueStalled, memstats.DetectorForcedGC, memstats.DetectorMCacheInuse, memstats.DetectorQueueLatency,
		memstats.DetectorFinalizerBlocked}
	for _, c := range memstats.CauseDetectors() {
		if !slices.Contains(want, c) { // forced_gc is a cause too
			want = append(want, c)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("samplerDetectors yields %v, want %v", got, want)
	}

	// A sampler that never sampled: every runtime series is there, at zero,
	// and every detector reads 0.
	c := newCollector(t, WithWatcher(newWatcher(t)), WithSampler(s))
	fams := gather(t, c)
	for _, name := range []string{"gcprobe_finalizer_queue_length", "gcprobe_finalizers_unwatched_total", "gcprobe_gc_pause_seconds", "gcprobe_gc_cpu_fraction"} {
		if fams[name] == nil {
			t.Errorf("no %s with WithSampler", name)
		}
	}
	if n := len(fams["gcprobe_detector_firing"].GetMetric()); n != len(want) {
		t.Errorf("%d detector series, want %d", n, len(want))
	}
}

func TestPedanticRegistry(t *testing.T) {
	w := plantedWatcher(t)
	c := newCollector(t, WithWatcher(w), WithTopK(1), WithSnapshotFunc(fakeSnapshot),
		WithDetectors(func(yield func(string, bool) bool) { yield("forced_gc", false) }),
		WithCauses(func(yield func(string, string) bool) { yield("allocation_driven", "main.f f.go:1") }))
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var described []string
	ch := make(chan *prometheus.Desc, 64)
	c.Describe(ch)
	close(ch)
	for d := range ch {
		described = append(described, d.String())
	}
	// gcprobe_finalizer_running_seconds is absent while nothing runs
	// (running_test.go checks it when something does), the per-site series
	// of a Sparse counter (gcprobe_finalizers_dropped_total without
	// registrations made through the standard library in the runtime
	// build mode, gcprobe_finalizers_cleared_outside_total) while it
	// counts nothing, and the three gcprobe_alloc_site_* without
	// WithHeapProfile.
	var sparse []string
	for _, k := range finalizerwatch.Counters() {
		if k.Sparse {
			sparse = append(sparse, k.Name)
		}
	}
	if len(fams) != len(described)-1-len(sparse)-3 {
		t.Errorf("gathered %d families, Describe lists %d: every series but the running, sparse (%s) and heap site ones should be there", len(fams), len(described), strings.Join(sparse, ", "))
	}
}

func TestAlongsideGoCollector(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(collectors.NewGoCollector())
	goFams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	c := newCollector(t, WithWatcher(plantedWatcher(t)), WithSnapshotFunc(fakeSnapshot))
	if err := reg.Register(c); err != nil {
		t.Fatalf("registering next to the Go collector: %v", err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, f := range fams {
		if seen[f.GetName()] {
			t.Errorf("family %s gathered twice", f.GetName())
		}
		seen[f.GetName()] = true
	}
	if len(fams) <= len(goFams) {
		t.Fatalf("%d families with gcprobe, %d without", len(fams), len(goFams))
	}
	// Nothing the Go collector already says: heap goal (go_memstats_next_gc_bytes),
	// GOGC, the memory limit, per-P caches, or pause quantiles.
	for _, f := range fams {
		name := f.GetName()
		if !strings.HasPrefix(name, "gcprobe_") {
			continue
		}
		for _, dup := range []string{"heap", "goal", "gogc", "memlimit", "memory_limit", "mcache", "gc_duration"} {
			if strings.Contains(name, dup) {
				t.Errorf("%s looks like a duplicate of a Go collector series (%q)", name, dup)
			}
		}
	}
}

func TestSecondCollectorAlreadyRegistered(t *testing.T) {
	w := newWatcher(t)
	tests := []struct {
		name   string
		second []Option
	}{
		{"same options", []Option{WithWatcher(w)}},
		{"with snapshot and detectors", []Option{WithWatcher(w), WithSnapshotFunc(fakeSnapshot),
			WithDetectors(func(func(string, bool) bool) {})}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			first := newCollector(t, WithWatcher(w))
			if err := reg.Register(first); err != nil {
				t.Fatal(err)
			}
			err := reg.Register(newCollector(t, tt.second...))
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				t.Fatalf("second Register = %v, want an AlreadyRegisteredError", err)
			}
			if are.ExistingCollector != first {
				t.Errorf("AlreadyRegisteredError names %v, want the first collector", are.ExistingCollector)
			}
		})
	}
}

// gather collects c through a pedantic registry and returns its families
// by name.
func gather(t testing.TB, c prometheus.Collector) map[string]*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]*dto.MetricFamily, len(fams))
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}

// labels returns the label values of m by name.
func labels(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// series returns the one series of family name with the given kind and
// site labels ("" for a label the family does not have).
func series(t testing.TB, fams map[string]*dto.MetricFamily, name, kind, site string) *dto.Metric {
	t.Helper()
	var found *dto.Metric
	for _, m := range fams[name].GetMetric() {
		l := labels(m)
		if l[labelKind] == kind && l[labelSite] == site {
			if found != nil {
				t.Fatalf("%s{kind=%q,site=%q}: two series", name, kind, site)
			}
			found = m
		}
	}
	if found == nil {
		var b bytes.Buffer
		for _, m := range fams[name].GetMetric() {
			b.WriteString(m.String() + "\n")
		}
		t.Fatalf("%s{kind=%q,site=%q}: no series among\n%s", name, kind, site, b.String())
	}
	return found
}

// Whatever a site's names, its label is valid UTF-8 and bounded: the
// label is stackcapture.Frame.Label (fuzzed in package stackcapture).
func TestSiteLabelIsBounded(t *testing.T) {
	long := stackcapture.Frame{Function: strings.Repeat("pkg.Generic[...].", 40) + "func1\xff", File: strings.Repeat("/deep", 100) + "/f.go", Line: 9}
	got := long.Label()
	if len(got) > stackcapture.MaxLabelLen || !utf8.ValidString(got) {
		t.Fatalf("label %q (%d bytes)", got, len(got))
	}
	if v := validLabel(got); v != got {
		t.Fatalf("validLabel changed a Label: %q", v)
	}
}

type unwatchedObj struct {
	p *int
	a [4]uint64
}

// TestUnwatchedCountsExactlyTheRawCallbacks runs the real thing: a watcher
// and a sampler share the process's GC-cycle sentinels, whose runs the
// runtime counts as executed finalizers and cleanups. Over GC cycles in
// which 3 finalizers are set with runtime.SetFinalizer directly and 2
// through the watcher, the unwatched counter goes up by exactly 3.
func TestUnwatchedCountsExactlyTheRawCallbacks(t *testing.T) {
	w := newWatcher(t)
	s, err := memstats.New()
	if err != nil {
		t.Fatal(err)
	}
	c := newCollector(t, WithWatcher(w), WithSampler(s))
	unwatched := func() float64 {
		s.Sample()
		return series(t, gather(t, c), "gcprobe_finalizers_unwatched_total", "finalizer", "").GetCounter().GetValue()
	}
	// Let the clock start and any callback still queued from earlier tests
	// run, then take the baseline.
	for range 3 {
		runtime.GC()
	}
	testkit.Poll(t, 20*time.Second, "the finalizer queue to drain", func() bool {
		s.Sample()
		q := s.Snapshot().Finalizers
		return q.Queued == q.Executed
	})
	before := unwatched()
	var ran atomic.Int32
	func() {
		for range 3 {
			runtime.SetFinalizer(&unwatchedObj{}, func(*unwatchedObj) { ran.Add(1) })
		}
		for range 2 {
			w.SetFinalizer(&unwatchedObj{}, func(*unwatchedObj) { ran.Add(1) })
		}
	}()
	testkit.AwaitGC(t, 20*time.Second, "the five finalizers to run", func() bool {
		return ran.Load() == 5
	})
	for range 3 { // more cycles: more sentinel runs, none of them unwatched
		runtime.GC()
	}
	testkit.Poll(t, 20*time.Second, "the queue to drain", func() bool {
		s.Sample()
		q := s.Snapshot().Finalizers
		return q.Queued == q.Executed
	})
	if got := unwatched() - before; got != 3 {
		t.Fatalf("unwatched went up by %v, want 3", got)
	}
}
