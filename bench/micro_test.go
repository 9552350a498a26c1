package bench

import (
	"fmt"
	"io"
	"net/http/httptest"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/gcprobe/probe"
	pprofexporter "github.com/gcprobe/probe/exporters/pprof"
	promexporter "github.com/gcprobe/probe/exporters/prometheus"
	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/internal/ledgertest"
	"github.com/gcprobe/probe/memstats"
)

// The micro benchmarks put each package's hot path beside what it wraps
// or replaces, through public API only:
//
//	SetFinalizer/shape=S/mode=M  S: setclear (set then clear on one live
//	                             object: the os.File pattern), churn (set on
//	                             a new object that is dropped at once), keepalive
//	                             (set on b.N live objects: the tables grow)
//	AddCleanup/shape=S/mode=M    addstop, churn, keepalive, likewise
//	                             M: raw (the runtime), watched (a Watcher with
//	                             default options), fullstacks
//	FinalizerRun, CleanupRun     end to end per object (an op is one
//	                             object): register a batch, drop it,
//	                             runtime.GC, wait until all ran
//	Overflow/site=S              set+clear on a live object at a site that
//	                             is in the ledger (intable) or that did not
//	                             fit in a full site table (overflow)
//	SamplerRound                 one memstats.Sampler.Sample
//	Gather/collector=go          client_golang's default Go collector
//	Gather/collector=gcprobe/... the gcprobe collector over a ledger of
//	                             sites=N distinct lines or stacks=N distinct
//	                             full stacks, as a scrape gathers it
//	Collect/collector=gcprobe/.. the same collector's Collect alone, without
//	                             the registry's per-series work
//	Profile/...                  the pprof profile of that ledger, encoded
//
// Registrations run from stackDepth frames below the benchmark, where a
// reconciler typically registers (full-stack capture is linear in depth).

// stackDepth is how many frames atDepth adds: with the testing harness,
// registrations see stacks about 16 frames deep.
const stackDepth = 10

// microObj is what the micro benchmarks register on: 32 bytes with a
// pointer, never tiny-allocated.
type microObj struct {
	p *int
	a [3]uint64
}

func noopFinalizer(*microObj) {}
func noopCleanup(int)         {}

// atDepth calls fn depth frames further down the stack.
//
//go:noinline
func atDepth(depth int, fn func()) {
	if depth == 0 {
		fn()
		return
	}
	atDepth(depth-1, fn)
}

// watchModes are the registration paths the micro benchmarks compare.
var watchModes = []struct {
	name string
	opts []finalizerwatch.Option // nil for raw
}{
	{"raw", nil},
	// The default options: the call site of every registration, and the
	// full stack of one in finalizerwatch.DefaultStackSampleRate.
	{"watched", []finalizerwatch.Option{}},
	{"fullstacks", []finalizerwatch.Option{finalizerwatch.WithFullStacks(true)}},
}

func newWatcher(tb testing.TB, opts ...finalizerwatch.Option) *finalizerwatch.Watcher {
	tb.Helper()
	w, err := finalizerwatch.New(opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(w.Close)
	return w
}

// finalizerFuncs returns set and clear for a mode: the runtime's, or a
// fresh watcher's.
func finalizerFuncs(b *testing.B, opts []finalizerwatch.Option) (set, clear func(*microObj)) {
	if opts == nil {
		return func(o *microObj) { runtime.SetFinalizer(o, noopFinalizer) },
			func(o *microObj) { runtime.SetFinalizer(o, nil) }
	}
	w := newWatcher(b, opts...)
	return func(o *microObj) { w.SetFinalizer(o, noopFinalizer) },
		func(o *microObj) { w.SetFinalizer(o, nil) }
}

// cleanupHandle is what AddCleanup returns: runtime.Cleanup or
// finalizerwatch.Cleanup. The cleanup benchmarks are generic in it, so that
// neither handle is boxed.
type cleanupHandle interface {
	comparable
	Stop()
}

func rawAddCleanup(o *microObj) runtime.Cleanup { return runtime.AddCleanup(o, noopCleanup, 0) }

// watchedAddCleanup returns AddCleanup into a fresh watcher.
func watchedAddCleanup(b *testing.B, opts []finalizerwatch.Option) func(*microObj) finalizerwatch.Cleanup {
	w := newWatcher(b, opts...)
	return func(o *microObj) finalizerwatch.Cleanup { return finalizerwatch.AddCleanupTo(w, o, noopCleanup, 0) }
}

func BenchmarkSetFinalizer(b *testing.B) {
	for _, m := range watchModes {
		b.Run("shape=setclear/mode="+m.name, func(b *testing.B) {
			set, clear := finalizerFuncs(b, m.opts)
			o := &microObj{}
			b.ReportAllocs()
			atDepth(stackDepth, func() {
				for b.Loop() {
					set(o)
					clear(o)
				}
			})
		})
	}
	for _, m := range watchModes {
		b.Run("shape=churn/mode="+m.name, func(b *testing.B) {
			set, _ := finalizerFuncs(b, m.opts)
			b.ReportAllocs()
			atDepth(stackDepth, func() {
				for b.Loop() {
					set(&microObj{})
				}
			})
		})
	}
	for _, m := range watchModes {
		b.Run("shape=keepalive/mode="+m.name, func(b *testing.B) {
			set, clear := finalizerFuncs(b, m.opts)
			objs := make([]*microObj, min(b.N, keepAliveBatch))
			for i := range objs {
				objs[i] = &microObj{}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for done := 0; done < b.N; {
				k := min(len(objs), b.N-done)
				atDepth(stackDepth, func() {
					for _, o := range objs[:k] {
						set(o)
					}
				})
				b.StopTimer()
				for _, o := range objs[:k] {
					clear(o)
				}
				b.StartTimer()
				done += k
			}
		})
	}
}

// keepAliveBatch is how many live registrations the keepalive shapes
// accumulate before clearing them (untimed) and starting over: a burst
// of long-lived registrations, with tables of realistic size rather than
// of b.N.
const keepAliveBatch = 100_000

func BenchmarkAddCleanup(b *testing.B) {
	for _, shape := range []struct {
		name string
		fn   func(b *testing.B, opts []finalizerwatch.Option)
	}{
		{"addstop", func(b *testing.B, opts []finalizerwatch.Option) {
			if opts == nil {
				benchAddStop(b, rawAddCleanup)
			} else {
				benchAddStop(b, watchedAddCleanup(b, opts))
			}
		}},
		{"churn", func(b *testing.B, opts []finalizerwatch.Option) {
			if opts == nil {
				benchAddChurn(b, rawAddCleanup)
			} else {
				benchAddChurn(b, watchedAddCleanup(b, opts))
			}
		}},
		{"keepalive", func(b *testing.B, opts []finalizerwatch.Option) {
			if opts == nil {
				benchAddKeepAlive(b, rawAddCleanup)
			} else {
				benchAddKeepAlive(b, watchedAddCleanup(b, opts))
			}
		}},
	} {
		for _, m := range watchModes {
			b.Run("shape="+shape.name+"/mode="+m.name, func(b *testing.B) { shape.fn(b, m.opts) })
		}
	}
}

func benchAddStop[C cleanupHandle](b *testing.B, add func(*microObj) C) {
	o := &microObj{}
	b.ReportAllocs()
	atDepth(stackDepth, func() {
		for b.Loop() {
			add(o).Stop()
		}
	})
	runtime.KeepAlive(o)
}

func benchAddChurn[C cleanupHandle](b *testing.B, add func(*microObj) C) {
	b.ReportAllocs()
	atDepth(stackDepth, func() {
		for b.Loop() {
			add(&microObj{})
		}
	})
}

func benchAddKeepAlive[C cleanupHandle](b *testing.B, add func(*microObj) C) {
	objs := make([]*microObj, min(b.N, keepAliveBatch))
	for i := range objs {
		objs[i] = &microObj{}
	}
	cs := make([]C, len(objs))
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; {
		k := min(len(objs), b.N-done)
		atDepth(stackDepth, func() {
			for i, o := range objs[:k] {
				cs[i] = add(o)
			}
		})
		b.StopTimer()
		for _, c := range cs[:k] {
			c.Stop()
		}
		b.StartTimer()
		done += k
	}
	runtime.KeepAlive(objs)
}

// BenchmarkOverflow is set+clear on a live object, as in
// SetFinalizer/shape=setclear/mode=watched, at a call site that has its own
// ledger entry (site=intable) or that came after the site table filled up
// and is counted under the overflow entry (site=overflow). The two differ
// only in WithMaxSites: 2, or 1 with the one entry taken by another line
// first. A registration that does not fit must cost no more than one that
// does, or a program with many sites pays most where it is already
// largest.
func BenchmarkOverflow(b *testing.B) {
	for _, tc := range []struct {
		name     string
		maxSites int
		overflow bool
	}{
		{"intable", 2, false},
		{"overflow", 1, true},
	} {
		b.Run("site="+tc.name, func(b *testing.B) {
			w := newWatcher(b, finalizerwatch.WithMaxSites(tc.maxSites))
			filler := &microObj{}
			w.SetFinalizer(filler, noopFinalizer) // takes the first entry
			o := &microObj{}
			setClear := func() {
				w.SetFinalizer(o, noopFinalizer)
				w.SetFinalizer(o, nil)
			}
			// One registration first, untimed: in the table it makes the
			// site's entry; and it shows where the line is counted.
			before := ledgertest.Overflow(w).Sites
			atDepth(stackDepth, setClear)
			if got := ledgertest.Overflow(w).Sites > before; got != tc.overflow {
				b.Fatalf("registration counted under the overflow site: %v, want %v", got, tc.overflow)
			}
			b.ReportAllocs()
			atDepth(stackDepth, func() {
				for b.Loop() {
					setClear()
				}
			})
			w.SetFinalizer(filler, nil)
			runtime.KeepAlive(filler)
		})
	}
}

// runBatch is the most objects FinalizerRun and CleanupRun have
// registered and unreachable at once.
const runBatch = 10_000

// runCounter counts the runs of the callbacks the Run benchmarks register,
// and signals when the count reaches target.
type runCounter struct {
	n      atomic.Uint64
	target atomic.Uint64
	done   chan struct{}
}

var runs = runCounter{done: make(chan struct{}, 1)}

func (c *runCounter) inc() {
	if c.n.Add(1) == c.target.Load() {
		c.done <- struct{}{}
	}
}

func countFinalizer(*microObj) { runs.inc() }
func countCleanup(int)         { runs.inc() }

// await waits for the signal that the target was reached. If the GC did
// not find every object of the batch unreachable in one cycle (a pointer
// left in a register or a dead stack slot), it runs another cycle each
// second until it has.
// Not testkit.AwaitGC: it runs in the timed loop, where a forced cycle a millisecond would be measured.
func (c *runCounter) await() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
			runtime.GC()
		}
	}
}

// registerBatch registers k objects that are unreachable when it returns.
//
//go:noinline
func registerBatch(k int, register func(*microObj)) {
	for range k {
		register(&microObj{})
	}
}

// benchmarkRun times, per object, registering a callback on objects that
// are dropped at once, a GC cycle finding them, and the callbacks running.
func benchmarkRun(b *testing.B, register func(*microObj)) {
	runtime.GC()
	b.ReportAllocs()
	b.ResetTimer()
	atDepth(stackDepth, func() {
		for done := 0; done < b.N; {
			k := min(runBatch, b.N-done)
			runs.target.Store(runs.n.Load() + uint64(k))
			registerBatch(k, register)
			runtime.GC()
			runs.await()
			done += k
		}
	})
}

func BenchmarkFinalizerRun(b *testing.B) {
	b.Run("mode=raw", func(b *testing.B) {
		benchmarkRun(b, func(o *microObj) { runtime.SetFinalizer(o, countFinalizer) })
	})
	b.Run("mode=watched", func(b *testing.B) {
		w := newWatcher(b)
		benchmarkRun(b, func(o *microObj) { w.SetFinalizer(o, countFinalizer) })
	})
}

func BenchmarkCleanupRun(b *testing.B) {
	b.Run("mode=raw", func(b *testing.B) {
		benchmarkRun(b, func(o *microObj) { runtime.AddCleanup(o, countCleanup, 0) })
	})
	b.Run("mode=watched", func(b *testing.B) {
		w := newWatcher(b)
		benchmarkRun(b, func(o *microObj) { finalizerwatch.AddCleanupTo(w, o, countCleanup, 0) })
	})
}

// fillGCHistory runs GC cycles until the runtime's pause history (256
// cycles) is full, so that reading it costs what it costs in a program
// that has run for a while.
var fillGCHistory = sync.OnceFunc(func() {
	var g debug.GCStats
	for debug.ReadGCStats(&g); g.NumGC < 256; debug.ReadGCStats(&g) {
		runtime.GC()
	}
})

func newSampler(b *testing.B) *memstats.Sampler {
	s, err := memstats.New()
	if err != nil {
		b.Fatal(err)
	}
	s.Sample()
	return s
}

// BenchmarkSamplerRound is one sampling round: runtime/metrics, the pause
// history, the derived signals and the detectors.
func BenchmarkSamplerRound(b *testing.B) {
	fillGCHistory()
	s := newSampler(b)
	b.ReportAllocs()
	for b.Loop() {
		s.Sample()
	}
}

func BenchmarkGather(b *testing.B) {
	b.Run("collector=go", func(b *testing.B) {
		fillGCHistory()
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector())
		benchmarkGather(b, reg)
	})
	for _, l := range ledgerShapes {
		b.Run("collector=gcprobe/"+l.name(), func(b *testing.B) {
			reg := prometheus.NewRegistry()
			reg.MustRegister(gcprobeCollector(b, l))
			benchmarkGather(b, reg)
		})
	}
}

// BenchmarkCollect is the collector's own share of a scrape: one Collect,
// its metrics drained from the channel, without the registry's work on
// each series that Gather adds (checking, hashing, sorting: client_golang's,
// about 1.3 µs a series here, whoever collects). The Go collector's Gather
// is the yardstick, as in the overhead issue's measure.
func BenchmarkCollect(b *testing.B) {
	for _, l := range ledgerShapes {
		b.Run("collector=gcprobe/"+l.name(), func(b *testing.B) {
			c := gcprobeCollector(b, l)
			ch := make(chan prometheus.Metric, 4096)
			b.ReportAllocs()
			for b.Loop() {
				c.Collect(ch)
				for len(ch) > 0 {
					<-ch
				}
			}
		})
	}
}

// gcprobeCollector returns the collector of a probe over ledger l, with a
// sampler, its ranking following the GC cycles until the benchmark ends.
func gcprobeCollector(b *testing.B, l ledgerShape) *promexporter.Collector {
	fillGCHistory()
	w := plantLedger(b, l)
	c, err := promexporter.New(promexporter.WithWatcher(w), promexporter.WithSampler(newSampler(b)))
	if err != nil {
		b.Fatal(err)
	}
	// As the probe does: the ranking follows the GC cycles on a goroutine
	// of its own, off the scrape (finalizerwatch's BenchmarkRankCycle
	// measures its cost per cycle).
	done, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		w.RankEachCycle(done)
	}()
	b.Cleanup(func() {
		close(done)
		<-ended
	})
	return c
}

func benchmarkGather(b *testing.B, g prometheus.Gatherer) {
	mfs, err := g.Gather()
	if err != nil {
		b.Fatal(err)
	}
	// What a gather costs is mostly client_golang's work on each series
	// (a histogram is one): reported beside the time, so that the
	// collectors' costs can be compared per series.
	series := 0
	for _, mf := range mfs {
		series += len(mf.GetMetric())
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := g.Gather(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(series), "series") // after the loop, which drops metrics reported before it
}

// BenchmarkProfile encodes the ledger as a gzipped pprof profile, as
// /debug/pprof/finalizers serves it.
func BenchmarkProfile(b *testing.B) {
	for _, l := range ledgerShapes {
		b.Run(l.name(), func(b *testing.B) {
			w := plantLedger(b, l)
			if err := pprofexporter.Write(io.Discard, w); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if err := pprofexporter.Write(io.Discard, w); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkPageData builds and encodes the live page's JSON document, as
// each refresh of /debug/gcprobe/ asks for it every two seconds: the
// probe's one read (the ledger's top sites with their stacks, the
// sampler, the causes of GC work) and the document with every counter of
// every top site.
func BenchmarkPageData(b *testing.B) {
	for _, l := range ledgerShapes {
		b.Run(l.name(), func(b *testing.B) {
			w := plantLedger(b, l)
			p, err := probe.New(probe.WithWatcher(w), probe.WithRegisterer(prometheus.NewRegistry()))
			if err != nil {
				b.Fatal(err)
			}
			h := p.PageHandler()
			req := httptest.NewRequest("GET", probe.PagePath+probe.PageDataPath, nil)
			serve := func() {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != 200 {
					b.Fatalf("data.json: %d %s", rec.Code, rec.Body)
				}
			}
			serve()
			b.ReportAllocs()
			for b.Loop() {
				serve()
			}
		})
	}
}

// ledgerShape is a ledger to export: n distinct sites (generated lines,
// default options) or n distinct full stacks at one line.
type ledgerShape struct {
	stacks bool
	n      int
}

func (l ledgerShape) name() string {
	if l.stacks {
		return fmt.Sprintf("stacks=%d", l.n)
	}
	return fmt.Sprintf("sites=%d", l.n)
}

var ledgerShapes = []ledgerShape{{false, 1}, {false, 300}, {false, 1000}, {false, 10_000}, {true, 10_000}}

// plantLedger returns a watcher whose ledger has l's entries, each with
// registrations outstanding over several GC cycles (so that ages and
// suspects are spread), made ready for export by one read (the sites'
// frames are symbolized once, on first read).
func plantLedger(b *testing.B, l ledgerShape) *finalizerwatch.Watcher {
	if !l.stacks && l.n > 1 && l.n > generatedSites {
		b.Skipf("needs %d generated sites, this build has %d: run bench/run.sh, which generates them", l.n, generatedSites)
	}
	opts := []finalizerwatch.Option{finalizerwatch.WithMaxSites(2 * l.n), finalizerwatch.WithMaxStacks(2 * l.n)}
	if l.stacks {
		opts = append(opts, finalizerwatch.WithFullStacks(true))
	}
	w := newWatcher(b, opts...)
	objs := make([]*siteObj, 0, 2*l.n)
	cs := make([]finalizerwatch.Cleanup, 0, 2*l.n)
	for round := range 2 {
		for i := range l.n {
			o := new(siteObj)
			objs = append(objs, o)
			cs = append(cs, registerEntry(w, l, o, i))
		}
		if round == 0 {
			runtime.GC()
			runtime.GC()
		}
	}
	// The exporters' read, once: it groups the entries by site and
	// symbolizes their frames.
	var sn finalizerwatch.Snapshot
	w.Read(&sn, finalizerwatch.ReadOptions{TopK: -1, Stacks: true, Fresh: true})
	b.Cleanup(func() {
		for i, o := range objs {
			if cs[i] == (finalizerwatch.Cleanup{}) {
				w.SetFinalizer(o, nil)
			} else {
				cs[i].Stop()
			}
		}
	})
	return w
}
