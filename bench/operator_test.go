package bench

import (
	"context"
	"flag"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/internal/ledgertest"

	"github.com/gcprobe/probe/internal/testkit"
)

// workers is the number of reconcile workers of BenchmarkOperator, as
// controller-runtime's MaxConcurrentReconciles: go test -bench Operator
// ./bench -workers 8, or WORKERS=8 bench/run.sh.
var workers = flag.Int("workers", defaultWorkers, "reconcile workers (MaxConcurrentReconciles) of BenchmarkOperator")

// drainTimeout bounds the wait for the finalizers and cleanups of a run to
// have run; it is a failure, never a measurement.
const drainTimeout = time.Minute

// BenchmarkOperator runs the operator-like workload (see workload_test.go)
// for b.N reconciles in each mode. Besides ns/op (wall time per reconcile
// with -workers in parallel) it reports:
//
//	reconciles/s      throughput
//	p50-ns, p99-ns    reconcile latency quantiles (within 0.8 %)
//	gc-pause-p99-ns   p99 of the stop-the-world GC pauses during the run
//	                  (runtime/metrics /sched/pauses/total/gc:seconds)
//	stw-other         stop-the-world pauses not caused by the GC during the
//	                  run (/sched/pauses/total/other:seconds observations):
//	                  runtime.ReadMemStats, for one
//	gc-cycles         GC cycles during the run
//	cpu-ns/reconcile  process CPU time (user + system, every goroutine:
//	                  the probe's, the GC's, the finalizer goroutine's)
//	rss-MiB           VmRSS at the end of the run; compare it between runs
//	                  in fresh processes only (bench/run.sh does), since
//	                  the heap a process grew stays mapped
//	otlp-spans        spans the receiver got (full mode)
//
// The timer covers the reconciles only: the probe starts before and stops
// after, and the finalizers and cleanups a run caused all run before the
// next run starts.
func BenchmarkOperator(b *testing.B) {
	for _, mode := range modes {
		b.Run("mode="+mode, func(b *testing.B) { benchmarkOperator(b, mode) })
	}
}

func benchmarkOperator(b *testing.B, mode string) {
	e, err := startEnv(mode, scrapeInterval)
	if err != nil {
		b.Fatal(err)
	}
	if *workers < 1 {
		b.Fatalf("-workers %d: must be at least 1", *workers)
	}
	wl := newWorkload(registrarFor(mode), *workers)
	if err := wl.drain(drainTimeout); err != nil { // what earlier runs left
		b.Fatal(err)
	}

	b.ResetTimer() // reads MemStats (a stop-the-world): before "before"
	before := readRuntime()
	cpu0, cpuOK := processCPU()
	rs, err := wl.run(b.N)
	cpu1, _ := processCPU()
	after := readRuntime()
	rss, rssOK := processRSS()
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}

	pauses := histDelta(before.gcPauses(), after.gcPauses())
	other := histDelta(before.otherPauses(), after.otherPauses())
	b.ReportMetric(float64(rs.reconciles)/rs.wall.Seconds(), "reconciles/s")
	b.ReportMetric(rs.latency.quantile(0.50), "p50-ns")
	b.ReportMetric(rs.latency.quantile(0.99), "p99-ns")
	if pauses.total() > 0 {
		b.ReportMetric(pauses.quantile(0.99)*1e9, "gc-pause-p99-ns")
	}
	b.ReportMetric(float64(other.total()), "stw-other")
	b.ReportMetric(float64(after.gcCycles()-before.gcCycles()), "gc-cycles")
	if cpuOK {
		b.ReportMetric(float64(cpu1-cpu0)/float64(rs.reconciles), "cpu-ns/reconcile")
	}
	if rssOK {
		b.ReportMetric(float64(rss)/(1<<20), "rss-MiB")
	}
	if mode == modeFull {
		spans, err := e.flushSpans()
		if err != nil {
			b.Error(err)
		}
		b.ReportMetric(float64(spans), "otlp-spans")
	}

	if err := e.err(); err != nil {
		b.Errorf("scrape: %v", err)
	}
	if err := wl.drain(drainTimeout); err != nil {
		b.Error(err)
	}
	if err := e.stop(); err != nil {
		b.Error(err)
	}
}

// TestOperatorWorkload runs a few hundred reconciles in each mode and
// checks what the benchmark relies on: every registration reaches the
// runtime (all finalizers and cleanups run once the objects are dropped),
// the probe's ledger counts them at the workload's lines, the metrics are
// scraped, and the full mode's spans reach the receiver.
func TestOperatorWorkload(t *testing.T) {
	n := 400
	if raceEnabled || testing.Short() {
		n = 120
	}
	finLine := testkit.MarkerLine(t, "workload_test.go", "workload finalizer")
	clnLine := testkit.MarkerLine(t, "workload_test.go", "workload cleanup")
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			e, err := startEnv(mode, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := e.stop(); err != nil {
					t.Error(err)
				}
			}()
			wl := newWorkload(registrarFor(mode), defaultWorkers)
			if err := wl.drain(drainTimeout); err != nil {
				t.Fatal(err)
			}
			fin0, cln0 := defaultSite(finLine), defaultSite(clnLine)

			rs, err := wl.run(n)
			if err != nil {
				t.Fatal(err)
			}
			if rs.latency.n != uint64(n) {
				t.Errorf("%d latencies recorded, want %d", rs.latency.n, n)
			}
			if want := uint64((n + registerEvery - 1) / registerEvery); rs.finalizers != want || rs.cleanups != uint64((n+registerEvery-2)/registerEvery) {
				t.Errorf("registered %d finalizers and %d cleanups in %d reconciles, want %d and %d",
					rs.finalizers, rs.cleanups, n, want, (n+registerEvery-2)/registerEvery)
			}
			if err := e.scrape(); err != nil {
				t.Errorf("scrape: %v", err)
			}
			if mode == modeFull {
				checkFullMode(t, e, finLine)
			}
			if err := wl.drain(drainTimeout); err != nil {
				t.Fatal(err)
			}

			if mode == modeRaw {
				if fin1 := defaultSite(finLine); fin1 != fin0 {
					t.Errorf("raw mode counted in finalizerwatch.Default: %+v -> %+v", fin0, fin1)
				}
				return
			}
			// Every registration counted at its line, and counted as
			// executed once the drain saw it run.
			for _, c := range []struct {
				kind       string
				before     siteCount
				line       int
				registered uint64
			}{{"finalizer", fin0, finLine, rs.finalizers}, {"cleanup", cln0, clnLine, rs.cleanups}} {
				after := defaultSite(c.line)
				if got := after.registered - c.before.registered; got != c.registered {
					t.Errorf("%s site line %d: %d registrations counted, want %d", c.kind, c.line, got, c.registered)
				}
				if got := after.executed - c.before.executed; got != c.registered {
					t.Errorf("%s site line %d: %d executions counted, want %d", c.kind, c.line, got, c.registered)
				}
			}
		})
	}
}

// checkFullMode checks that the full mode's listener serves the
// workload's sites and that a leak report reaches the OTLP receiver.
func checkFullMode(t *testing.T, e *env, finLine int) {
	t.Helper()
	body, err := e.scrapeBody()
	if err != nil {
		t.Fatal(err)
	}
	want := "workload_test.go:" + strconv.Itoa(finLine)
	if !strings.Contains(body, "gcprobe_finalizers_registered_total{") || !strings.Contains(body, want) {
		t.Errorf("/metrics has no gcprobe_finalizers_registered_total series for %s:\n%.2000s", want, body)
	}
	e.probe.ReportNow(context.Background())
	spans, err := e.flushSpans()
	if err != nil {
		t.Fatal(err)
	}
	if spans == 0 {
		t.Error("no span reached the OTLP receiver after a leak report and a flush")
	}
}

// siteCount is one line's counts in finalizerwatch.Default.
type siteCount struct{ registered, executed uint64 }

// defaultSite returns the counts of the site on line of workload_test.go
// in finalizerwatch.Default (zero if it has none).
func defaultSite(line int) siteCount {
	var c siteCount
	for _, s := range ledgertest.Sites(finalizerwatch.Default) {
		if s.Site.Line == line && strings.HasSuffix(s.Site.File, "/workload_test.go") {
			c.registered += s.Registered
			c.executed += s.Executed
		}
	}
	return c
}
