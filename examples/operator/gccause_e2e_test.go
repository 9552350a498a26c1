package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/gcprobe/probe"
	"github.com/gcprobe/probe/heapprofile"
	"github.com/gcprobe/probe/internal/testkit"
)

// TestGCCauseOperator runs the operator of gccause_scenario_test.go
// against a real kube-apiserver and etcd (envtest), with the probe started
// as an operator starts it, and checks what its Report names:
// without the fixes, managedFields in the cache (with
// cache.TransformStripManagedFields) and the deep copies of the
// reconciler's List (at that line, with client.UnsafeDisableDeepCopy);
// with both fixes, neither, over as many windows as it took to name them.
// About 40 s on 2 cores: 20 s to create the ConfigMaps, a few seconds for
// each manager.
func TestGCCauseOperator(t *testing.T) {
	defer needEnvtest(t)()
	if !heapprofile.ReadOperatorEnv().LinksKubernetes {
		t.Fatal("ReadOperatorEnv: this operator's test binary does not link client-go or controller-runtime")
	}
	// One sample every 64 KiB rather than 512 KiB: the managedFields of
	// 1500 ConfigMaps are a few thousand objects of about 1 KiB, which
	// the default rate estimates from a dozen samples.
	defer func(rate int) { runtime.MemProfileRate = rate }(runtime.MemProfileRate)
	runtime.MemProfileRate = 64 << 10

	env := &envtest.Environment{}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("starting envtest: %v", err)
	}
	defer func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping envtest: %v", err)
		}
	}()
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "gccause-"}}
	if err := c.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	seedConfigMaps(t, cfg, ns.Name)
	t.Logf("%d ConfigMaps applied by %d field managers in %v", scenarioConfigMaps, scenarioManagers, time.Since(start).Round(time.Millisecond))

	listFile, err := filepath.Abs("gccause_scenario_test.go")
	if err != nil {
		t.Fatal(err)
	}
	listLine := testkit.MarkerLine(t, "gccause_scenario_test.go", "gccause-list")

	// Without the fixes: both causes named, the deep copies at the
	// reconciler's List.
	var windows uint64
	t.Run("unfixed", func(t *testing.T) {
		var last []heapprofile.OperatorCause
		var report string
		windows = judgeScenario(t, cfg, ns.Name, false, 60*time.Second, 0, func(cs []heapprofile.OperatorCause, rep string) bool {
			last, report = cs, rep
			mf, dc := find(cs, heapprofile.CauseManagedFieldsCached), find(cs, heapprofile.CauseCacheDeepCopy)
			return mf != nil && dc != nil && dc.Site.Line == listLine && dc.Site.File == listFile
		}, func() string { return describe(last) })
		mf, dc := find(last, heapprofile.CauseManagedFieldsCached), find(last, heapprofile.CauseCacheDeepCopy)
		if !strings.Contains(mf.Fix, "cache.TransformStripManagedFields()") {
			t.Errorf("managedFields' fix %q does not name cache.TransformStripManagedFields()", mf.Fix)
		}
		if !strings.Contains(dc.Fix, "client.UnsafeDisableDeepCopy") {
			t.Errorf("the deep copies' fix %q does not name client.UnsafeDisableDeepCopy", dc.Fix)
		}
		if !strings.HasSuffix(dc.Site.Function, ".(*listAllReconciler).Reconcile") {
			t.Errorf("the deep copies' site %v is not the reconciler's", dc.Site)
		}
		// The Report says it all in words: the causes, the fixes by
		// API name, the reconciler's line.
		for _, want := range []string{"GC cause: " + heapprofile.CauseManagedFieldsCached, "cache.TransformStripManagedFields()",
			"GC cause: " + heapprofile.CauseCacheDeepCopy, "client.UnsafeDisableDeepCopy",
			fmt.Sprintf("at %s gccause_scenario_test.go:%d", dc.Site.Function, listLine)} {
			if !strings.Contains(report, want) {
				t.Errorf("the Report lacks %q:\n%s", want, report)
			}
		}
		t.Logf("named after %d windows:\n%s\nReport:\n%s", windows, describe(last), report)
	})
	if t.Failed() {
		return
	}

	// With both fixes, the same program: neither, over at least as many
	// windows (and never fewer than 4) as the unfixed one took.
	t.Run("fixed", func(t *testing.T) {
		need := max(windows, 4)
		var named []heapprofile.OperatorCause
		judgeScenario(t, cfg, ns.Name, true, 60*time.Second, need, func(cs []heapprofile.OperatorCause, report string) bool {
			// The causes and their fixes only: an allocating line's path
			// may pass through client.UnsafeDisableDeepCopy's own option.
			var said strings.Builder
			for _, l := range strings.Split(report, "\n") {
				if t := strings.TrimSpace(l); strings.HasPrefix(t, "GC cause:") || strings.HasPrefix(t, "fix:") {
					said.WriteString(l + "\n")
				}
			}
			for _, w := range []string{"TransformStripManagedFields", "UnsafeDisableDeepCopy"} {
				if strings.Contains(said.String(), w) {
					t.Errorf("the fixed program's Report says %s:\n%s", w, report)
				}
			}
			for _, n := range []string{heapprofile.CauseManagedFieldsCached, heapprofile.CauseCacheDeepCopy} {
				if c := find(cs, n); c != nil {
					named = append(named, *c)
				}
			}
			return false
		}, func() string { return describe(named) })
		if len(named) > 0 {
			t.Errorf("with cache.TransformStripManagedFields() and client.UnsafeDisableDeepCopy, still named:\n%s", describe(named))
		}
	})
}

// judgeScenario runs the scenario's manager (fixed or not) until its
// reconciler lists every ConfigMap, then profiles it every 250 ms and
// judges each new window (one a GC cycle ended in), until done holds or,
// with hold > 0, until hold windows were judged; it returns the windows
// judged. It fails t if neither happens within the deadline, with what
// last says.
func judgeScenario(t *testing.T, cfg *rest.Config, ns string, fixed bool, within time.Duration, hold uint64,
	done func(causes []heapprofile.OperatorCause, report string) bool, last func() string) uint64 {
	t.Helper()
	r, stop := runScenarioManager(t, cfg, ns, fixed)
	defer stop()
	testkit.Poll(t, within, "the reconciler's first list of every ConfigMap", func() bool {
		return r.seen.Load() == scenarioConfigMaps
	})
	// The profiler starts once the cache is full: its first read is the
	// baseline, and the windows after it are the reconciler's steady
	// state, not the cache's first list. The runtime publishes the
	// profile as of the latest GC cycle, an allocation two cycles after
	// it was made: two cycles first put the first list (and whatever the
	// previous manager allocated) before the baseline.
	runtime.GC()
	runtime.GC()
	variant := map[bool]string{false: "unfixed", true: "fixed"}[fixed]
	if writeHeapProfile(t, "gccause-"+variant+"-base.pb.gz") {
		// Profiles asked for are measurements: they cover at least
		// profileWindow of the reconciler's steady state, whenever
		// the judgement is done.
		base := time.Now()
		defer func() {
			time.Sleep(time.Until(base.Add(profileWindow))) // a measurement window, not synchronisation
			runtime.GC()                                    // publish it
			runtime.GC()
			writeHeapProfile(t, "gccause-"+variant+".pb.gz")
		}()
	}
	// The probe, as the operator starts it: its heap profiler sums the
	// operator signatures (the binary links client-go), and its Report
	// names the operator causes judged from each read.
	p, err := probe.Start(probe.WithRegisterer(prometheus.NewRegistry()),
		probe.WithLogger(slog.New(slog.DiscardHandler)),
		probe.WithHeapProfileOptions(heapprofile.WithInterval(250*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	var judged, reads uint64
	var sn heapprofile.Snapshot
	// What was last judged is formatted only if the test fails, not at
	// every check: the checks share the heap the profiler measures.
	defer func() {
		if t.Failed() {
			t.Logf("%d windows judged (of %d), %d lists; last judged:\n%sfrom:\n%s", judged, hold, r.lists.Load(), last(), figures(sn))
		}
	}()
	testkit.PollEvery(t, within, 20*time.Millisecond, "the scenario judged", func() (bool, string) {
		if next := p.HeapProfile().Snapshot(); next.Reads > reads && next.Window > 0 {
			sn, reads = next, next.Reads
			judged++
			rep := p.Report()
			return done(operatorCauses(rep), rep.String()) || (hold > 0 && judged >= hold), ""
		}
		return false, ""
	})
	t.Logf("%d windows judged, %d lists; the latest, %v:\n%s", judged, r.lists.Load(), sn.Window.Round(time.Millisecond), figures(sn))
	return judged
}

// profileWindow is how much of each manager's steady state the heap
// profiles of $GCPROBE_ARTIFACTS cover.
const profileWindow = 10 * time.Second

// writeHeapProfile writes the runtime's heap profile, as pprof serves it,
// to name in $GCPROBE_ARTIFACTS, and reports whether it is set. The
// figures of docs/gc-cause.md come from such profiles, each run's taken
// at the baseline and profileWindow later, e.g.
//
//	go tool pprof -top -sample_index=inuse_space -focus='ManagedFieldsEntry\)\.Unmarshal' gccause-unfixed.pb.gz
//	go tool pprof -top -sample_index=alloc_space -focus=DeepCopy -base gccause-unfixed-base.pb.gz gccause-unfixed.pb.gz
func writeHeapProfile(t *testing.T, name string) bool {
	dir := os.Getenv("GCPROBE_ARTIFACTS")
	if dir == "" {
		return false
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		t.Error(err)
	}
	if err := f.Close(); err != nil {
		t.Error(err)
	}
	return true
}

// figures writes the snapshot's signature figures, one a line: the
// measured shares of the scenario.
func figures(sn heapprofile.Snapshot) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  all: %.1f MB in use, %.1f MB allocated\n", float64(sn.TotalInUseBytes)/1e6, float64(sn.TotalAllocBytes)/1e6)
	for _, s := range sn.Signatures {
		fmt.Fprintf(&b, "  %s: %.1f%% of in use (%.1f MB), %.1f%% of allocated (%.1f MB/s)\n",
			s.Name, 100*s.InUseShare, float64(s.InUseBytes)/1e6, 100*s.AllocShare, s.AllocBytesPerSecond/1e6)
	}
	return b.String()
}

// operatorCauses returns the operator causes the Report names.
func operatorCauses(rep probe.Report) []heapprofile.OperatorCause {
	var cs []heapprofile.OperatorCause
	for _, c := range rep.GCCause.Causes {
		if c.Operator {
			cs = append(cs, heapprofile.OperatorCause{Name: c.Name, Words: c.Words, Fix: c.Fix,
				Value: c.Value, Threshold: c.Threshold, Site: c.Line})
		}
	}
	return cs
}

// find returns the cause named name, or nil.
func find(cs []heapprofile.OperatorCause, name string) *heapprofile.OperatorCause {
	i := slices.IndexFunc(cs, func(c heapprofile.OperatorCause) bool { return c.Name == name })
	if i < 0 {
		return nil
	}
	return &cs[i]
}

// describe writes causes one a line.
func describe(cs []heapprofile.OperatorCause) string {
	if len(cs) == 0 {
		return "(none)"
	}
	var b strings.Builder
	for _, c := range cs {
		b.WriteString("  " + c.String() + "\n")
	}
	return b.String()
}
