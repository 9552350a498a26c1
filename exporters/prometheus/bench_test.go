package promexporter

import (
	"math/rand/v2"
	"testing"

	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/internal/ledgertest"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/gcprobe/probe/internal/testkit"
)

// The benchmarks compare the cost of a scrape of gcprobe with that of the
// Go collector every registry carries: run them together,
//
//	go test -run '^$' -bench 'Collect10000Sites|GoCollectorGather|Gather10000Sites|Watcher' ./exporters/prometheus
//
// A real ledger of 10 000 distinct call sites would take 10 000 lines of
// registering code; the watcher-backed benchmarks use 10 200 ledger
// entries instead (the 300 generated sites, each reached by 34 distinct
// stacks, with full stacks on), which Watcher.Sites reads and merges like
// entries of distinct sites. The synthetic benchmark feeds a snapshot of
// 10 000 distinct sites straight to the collector, leaving out what
// Watcher.Read costs.

const benchPaths = 34 // stacks per generated site: 300 × 34 = 10 200 entries

// benchLedger returns a watcher with 10 200 ledger entries over the 300
// generated sites, their objects kept until the benchmark ends.
func benchLedger(b *testing.B) *finalizerwatch.Watcher { return benchLedgerOf(b, benchPaths) }

// benchLedgerOf returns a watcher whose 300 generated sites are each
// reached by paths distinct stacks: 300 × paths ledger entries.
func benchLedgerOf(b *testing.B, paths int) *finalizerwatch.Watcher {
	b.Helper()
	n := len(generatedSites) * paths
	w, err := finalizerwatch.New(finalizerwatch.WithFullStacks(true),
		finalizerwatch.WithMaxSites(2*n), finalizerwatch.WithMaxStacks(2*n))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(w.Close)
	objs := make([]*siteObj, 0, n)
	b.Cleanup(func() { objs = nil })
	for _, register := range generatedSites {
		for path := range uint(paths) {
			testkit.AtPath(path, 6, func() {
				o := new(siteObj)
				register(w, o)
				objs = append(objs, o)
			})
		}
	}
	if got := len(ledgertest.Entries(w)); got < n {
		b.Fatalf("%d ledger entries, want %d", got, n)
	}
	return w
}

// collectAll runs one Collect and drains what it sent.
func collectAll(c prometheus.Collector, ch chan prometheus.Metric) {
	c.Collect(ch)
	for len(ch) > 0 {
		<-ch
	}
}

// BenchmarkGoCollectorGather is the yardstick: one Gather of a registry
// that holds client_golang's default Go collector.
func BenchmarkGoCollectorGather(b *testing.B) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector())
	b.ReportAllocs()
	for b.Loop() {
		if _, err := reg.Gather(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCollect10000Sites(b *testing.B) {
	b.Run("ledger=watcher", func(b *testing.B) {
		w := benchLedger(b)
		eachRanking(b, w, func(b *testing.B) {
			c := newCollector(b, WithWatcher(w))
			ch := make(chan prometheus.Metric, 4096)
			b.ReportAllocs()
			for b.Loop() {
				collectAll(c, ch)
			}
		})
	})
	b.Run("ledger=synthetic", func(b *testing.B) {
		sites := synthSites(rand.New(rand.NewPCG(7, 8)), 10000)
		c := newCollector(b, WithWatcher(newWatcher(b)))
		// The snapshot a watcher would hand over, built once: the
		// collector's own work.
		var sn finalizerwatch.Snapshot
		snapshotOf(&sn, sites, DefaultTopK)
		c.read = func(dst *finalizerwatch.Snapshot) { *dst = sn }
		ch := make(chan prometheus.Metric, 4096)
		b.ReportAllocs()
		for b.Loop() {
			collectAll(c, ch)
		}
	})
}

// BenchmarkGather10000Sites is a whole scrape's work: Collect plus the
// registry's encoding into protobuf structures, as for the Go collector.
// With rank=scrape the first scrape of each GC cycle ranks the ledger (a
// watcher nobody ranks for); with rank=cycle a goroutine runs
// Watcher.RankEachCycle alongside, as the probe does, and the scrapes
// read its ranking (its work, BenchmarkRankCycle in finalizerwatch, then
// competes for the CPUs instead).
func BenchmarkGather10000Sites(b *testing.B) { benchGather(b, benchPaths) }

// BenchmarkGather1000Sites is the same at 1 200 ledger entries (the 300
// sites, 4 stacks into each).
func BenchmarkGather1000Sites(b *testing.B) { benchGather(b, 4) }

func benchGather(b *testing.B, paths int) {
	w := benchLedgerOf(b, paths)
	eachRanking(b, w, func(b *testing.B) {
		reg := prometheus.NewRegistry()
		reg.MustRegister(newCollector(b, WithWatcher(w)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := reg.Gather(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// eachRanking runs bench twice on w: as rank=scrape, where the first read
// of each GC cycle ranks, and as rank=cycle, with w.RankEachCycle running
// alongside, as in the probe.
func eachRanking(b *testing.B, w *finalizerwatch.Watcher, bench func(b *testing.B)) {
	b.Run("rank=scrape", bench)
	b.Run("rank=cycle", func(b *testing.B) {
		done := make(chan struct{})
		ended := make(chan struct{})
		go func() {
			defer close(ended)
			w.RankEachCycle(done)
		}()
		defer func() {
			close(done)
			<-ended
		}()
		bench(b)
	})
}

// BenchmarkWatcher10000 measures the finalizerwatch calls a Collect could
// build on, on the same ledger.
func BenchmarkWatcher10000(b *testing.B) {
	w := benchLedger(b)
	b.Run("Stacks", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ledgertest.Entries(w)
		}
	})
	b.Run("Sites", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ledgertest.Sites(w)
		}
	})
	b.Run("Top10", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ledgertest.Top(w, 10)
		}
	})
}

// BenchmarkCollect300Sites is a ledger of a more usual size: the 300
// generated sites, one entry each.
func BenchmarkCollect300Sites(b *testing.B) {
	w, err := finalizerwatch.New()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(w.Close)
	objs := make([]*siteObj, 0, len(generatedSites))
	b.Cleanup(func() { objs = nil })
	for _, register := range generatedSites {
		o := new(siteObj)
		register(w, o)
		objs = append(objs, o)
	}
	c := newCollector(b, WithWatcher(w))
	ch := make(chan prometheus.Metric, 4096)
	b.ReportAllocs()
	for b.Loop() {
		collectAll(c, ch)
	}
}
