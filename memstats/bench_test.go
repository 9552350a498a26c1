package memstats

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// The benchmarks put one sampling round beside what other ways of reading
// the same state cost, in one run:
//
//	go test -run xxx -bench . -benchmem ./memstats/

// fillGCHistory runs GC cycles until the runtime's pause history (256
// cycles) is full, so that debug.ReadGCStats copies all of it as it would
// in a long-running program.
func fillGCHistory() {
	var g debug.GCStats
	for debug.ReadGCStats(&g); g.NumGC < 256; debug.ReadGCStats(&g) {
		runtime.GC()
	}
}

// BenchmarkSample is one full round: runtime/metrics, the GC pause
// history, derived signals and detectors.
func BenchmarkSample(b *testing.B) {
	fillGCHistory()
	s, err := New()
	if err != nil {
		b.Fatal(err)
	}
	s.Subscribe(func(Event) {})
	s.Sample()
	b.ReportAllocs()
	for b.Loop() {
		s.Sample()
	}
}

// BenchmarkSampleWhileRunning is a round with the sampler's goroutine and
// sentinels running, so the queue latencies are computed too.
func BenchmarkSampleWhileRunning(b *testing.B) {
	fillGCHistory()
	s, err := New()
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Start(); err != nil {
		b.Fatal(err)
	}
	defer s.Stop()
	runtime.GC()
	s.Sample()
	b.ReportAllocs()
	for b.Loop() {
		s.Sample()
	}
}

// BenchmarkSnapshotInto is the reader's side.
func BenchmarkSnapshotInto(b *testing.B) {
	s, err := New()
	if err != nil {
		b.Fatal(err)
	}
	s.Sample()
	var sn Snapshot
	b.ReportAllocs()
	for b.Loop() {
		s.SnapshotInto(&sn)
	}
}

// BenchmarkMetricsRead is the runtime/metrics part of a round alone.
func BenchmarkMetricsRead(b *testing.B) {
	s := newSamples()
	metrics.Read(s)
	b.ReportAllocs()
	for b.Loop() {
		metrics.Read(s)
	}
}

// BenchmarkReadGCStats is the pause-history part of a round alone.
func BenchmarkReadGCStats(b *testing.B) {
	fillGCHistory()
	var g debug.GCStats
	debug.ReadGCStats(&g)
	b.ReportAllocs()
	for b.Loop() {
		debug.ReadGCStats(&g)
	}
}

// BenchmarkReadMemStats is what the sampler avoids by default: it stops
// the world.
func BenchmarkReadMemStats(b *testing.B) {
	var m runtime.MemStats
	b.ReportAllocs()
	for b.Loop() {
		runtime.ReadMemStats(&m)
	}
}

// BenchmarkPrometheusGoCollectorGather is client_golang's default Go
// collector gathered from a registry of its own.
func BenchmarkPrometheusGoCollectorGather(b *testing.B) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector())
	if _, err := reg.Gather(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := reg.Gather(); err != nil {
			b.Fatal(err)
		}
	}
}
