package main

import (
	"math"
	"strings"
	"testing"
)

const sample = `goos: linux
BenchmarkOperator/mode=raw-2      100  2000 ns/op  1000 reconciles/s  10 p99-ns  0 stw-other  40.0 rss-MiB
BenchmarkOperator/mode=raw-2      100  2000 ns/op  1200 reconciles/s  12 p99-ns  0 stw-other  42.0 rss-MiB
BenchmarkOperator/mode=raw-2      100  2000 ns/op  1100 reconciles/s  11 p99-ns  0 stw-other  41.0 rss-MiB
BenchmarkOperator/mode=default-2  100  2000 ns/op  1078 reconciles/s  11.5 p99-ns  0 stw-other  43.0 rss-MiB
BenchmarkOperator/mode=full-2     100  2000 ns/op  1000 reconciles/s  20 p99-ns  3 stw-other  45.0 rss-MiB
BenchmarkSitesRSS/sites=10000/mode=none  1  5 ns/op  50 rss-MiB
BenchmarkSitesRSS/sites=10000/mode=probe  1  5 ns/op  57.5 rss-MiB
--- BENCH: not a result line 1 2 3
PASS
`

func TestParseAndMedian(t *testing.T) {
	s := samples{}
	if err := s.parse(strings.NewReader(sample)); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, unit string
		want       float64
		n          int
	}{
		{"Operator/mode=raw", "reconciles/s", 1100, 3},
		{"Operator/mode=raw", "rss-MiB", 41, 3},
		{"Operator/mode=default", "p99-ns", 11.5, 1},
		{"SitesRSS/sites=10000/mode=probe", "rss-MiB", 57.5, 1},
	} {
		got, n := s.median(key{tt.name, tt.unit})
		if got != tt.want || n != tt.n {
			t.Errorf("median(%s, %s) = %v of %d, want %v of %d", tt.name, tt.unit, got, n, tt.want, tt.n)
		}
	}
	if got, n := s.median(key{"Missing", "ns/op"}); !math.IsNaN(got) || n != 0 {
		t.Errorf("median of nothing = %v of %d, want NaN of 0", got, n)
	}
	if got, _ := (samples{key{"x", "u"}: {4, 1, 3, 2}}).median(key{"x", "u"}); got != 2.5 {
		t.Errorf("median of 1..4 = %v, want 2.5", got)
	}
}

func TestEvaluate(t *testing.T) {
	s := samples{}
	if err := s.parse(strings.NewReader(sample)); err != nil {
		t.Fatal(err)
	}
	byLabel := map[string]row{}
	for _, r := range rows() {
		byLabel[r.label] = r
	}
	for _, tt := range []struct {
		label   string
		want    float64
		verdict string
	}{
		// Three raw samples, one default: not paired, the medians compare.
		{"throughput, default", 0.98, "met"},
		{"throughput, full", 1000.0 / 1100, "MISSED by 4.3%"},
		{"p99 reconcile latency, default", 11.5 / 11, "met"},
		{"non-GC stop-the-world pauses, default", 0, "met"},
		{"non-GC stop-the-world pauses, full", 3, ""},
		{"RSS added, full", 4, ""},
		{"RSS added at sites=10000", 7.5, "MISSED by 2.5 MiB"},
		{"RSS added at stacks=10000", math.NaN(), "no data"},
	} {
		r, ok := byLabel[tt.label]
		if !ok {
			t.Fatalf("no row %q", tt.label)
		}
		_, _, v, _, _, verdict := r.evaluate(s)
		if !(math.Abs(v-tt.want) < 1e-9 || math.IsNaN(v) && math.IsNaN(tt.want)) || verdict != tt.verdict {
			t.Errorf("%s: %v, %q; want %v, %q", tt.label, v, verdict, tt.want, tt.verdict)
		}
	}
	var b strings.Builder
	if err := write(&b, rows(), s); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "throughput, full") || !strings.Contains(b.String(), "MISSED by 4.3%") {
		t.Errorf("table lacks a row:\n%s", b.String())
	}
}

func TestPaired(t *testing.T) {
	// Three rounds with drift: the baseline and the probe slow down
	// together, so the per-round ratios are steady though the medians
	// are not.
	s := samples{
		key{"Operator/mode=raw", "reconciles/s"}:     {1000, 500, 2000},
		key{"Operator/mode=default", "reconciles/s"}: {990, 480, 1990},
	}
	r := row{probe: "Operator/mode=default", baseline: "Operator/mode=raw", unit: "reconciles/s", compare: ratio, op: ">=", goal: 0.98}
	med, lo, hi, ok := s.paired(r)
	if !ok || med != 0.99 || lo != 0.96 || hi != 0.995 {
		t.Errorf("paired = %v [%v, %v] %v, want 0.99 [0.96, 0.995] true", med, lo, hi, ok)
	}
	if _, _, v, _, _, verdict := r.evaluate(s); v != 0.99 || verdict != "met (rounds on both sides)" {
		t.Errorf("evaluate = %v, %q; want 0.99, met (rounds on both sides)", v, verdict)
	}
}
