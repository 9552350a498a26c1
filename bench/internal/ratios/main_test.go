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
		{"RSS added at sites=10000", 7.5, "MISSED by 1.5 MiB"},
		{"RSS added at stacks=10000", math.NaN(), "no data"},
	} {
		r, ok := byLabel[tt.label]
		if !ok {
			t.Fatalf("no row %q", tt.label)
		}
		_, _, v, _, _, verdict := r.evaluate(s, nil)
		if !(math.Abs(v-tt.want) < 1e-9 || math.IsNaN(v) && math.IsNaN(tt.want)) || verdict != tt.verdict {
			t.Errorf("%s: %v, %q; want %v, %q", tt.label, v, verdict, tt.want, tt.verdict)
		}
	}
	var b strings.Builder
	if err := write(&b, rows(), s, nil); err != nil {
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
	if _, _, v, _, _, verdict := r.evaluate(s, nil); v != 0.99 || verdict != "met (rounds on both sides)" {
		t.Errorf("evaluate = %v, %q; want 0.99, met (rounds on both sides)", v, verdict)
	}
}

// TestGoals pins the goals of the overhead issue, row by row: a goal that
// changes by accident fails here.
func TestGoals(t *testing.T) {
	byLabel := map[string]row{}
	for _, r := range rows() {
		if _, dup := byLabel[r.label]; dup {
			t.Errorf("two rows labelled %q", r.label)
		}
		byLabel[r.label] = r
	}
	for _, tt := range []struct {
		label, goal string
	}{
		{"SetFinalizer setclear, default (stacks sampled)", "<= 1.3×"},
		{"SetFinalizer churn, default (stacks sampled)", "<= 1.25×"},
		{"SetFinalizer keepalive, default (stacks sampled)", "<= 1.25×"},
		{"AddCleanup addstop, default (stacks sampled)", "<= 1.45×"},
		{"AddCleanup churn, default (stacks sampled)", "<= 1.3×"},
		{"AddCleanup keepalive, default (stacks sampled)", "<= 1.3×"},
		{"SetFinalizer setclear, full stacks", "<= 2×"},
		{"SetFinalizer churn, full stacks", "<= 2×"},
		{"SetFinalizer keepalive, full stacks", "<= 2×"},
		{"AddCleanup addstop, full stacks", "<= 2×"},
		{"AddCleanup churn, full stacks", "<= 2×"},
		{"AddCleanup keepalive, full stacks", "<= 2×"},
		{"finalizer run, end to end, added per object", "<= +100.0ns"},
		{"cleanup run, end to end, added per object", "<= +100.0ns"},
		{"gcprobe collect sites=300 vs Go collector gather", "<= 1×"},
		{"gcprobe collect sites=1000 vs Go collector gather", "<= 1×"},
		{"gcprobe collect sites=10000 vs Go collector gather", "<= 1×"},
		{"gcprobe collect stacks=10000 vs Go collector gather", ""},
		{"gcprobe gather sites=300 vs Go collector gather", ""},
		{"gcprobe gather sites=10000 vs Go collector gather", ""},
		{"pprof profile sites=1000", "<= 1.00ms"},
		{"pprof profile sites=10000", "<= 10.00ms"},
		{"pprof profile stacks=10000", "<= 15.00ms"},
		{"RSS added at sites=10000", "<= +6.0 MiB"},
		{"SetFinalizer setclear, overflow site vs in-table", "<= 1.05×"},
		{"throughput, default", ">= 0.98×"},
	} {
		r, ok := byLabel[tt.label]
		if !ok {
			t.Errorf("no row %q", tt.label)
			continue
		}
		if got := r.goalString(); got != tt.goal {
			t.Errorf("%s: goal %q, want %q", tt.label, got, tt.goal)
		}
	}
}

// micro is benchmark output in the shape of the micro suite: two rounds.
const micro = `BenchmarkSetFinalizer/shape=setclear/mode=raw-2         1000  200 ns/op  0 B/op  0 allocs/op
BenchmarkSetFinalizer/shape=setclear/mode=watched-2     1000  250 ns/op  0 B/op  0 allocs/op
BenchmarkSetFinalizer/shape=setclear/mode=fullstacks-2  1000  500 ns/op  0 B/op  0 allocs/op
BenchmarkSetFinalizer/shape=setclear/mode=raw-2         1000  220 ns/op  0 B/op  0 allocs/op
BenchmarkSetFinalizer/shape=setclear/mode=watched-2     1000  300 ns/op  0 B/op  0 allocs/op
BenchmarkSetFinalizer/shape=setclear/mode=fullstacks-2  1000  400 ns/op  0 B/op  0 allocs/op
BenchmarkFinalizerRun/mode=raw-2      10000  700 ns/op
BenchmarkFinalizerRun/mode=watched-2  10000  780 ns/op
BenchmarkFinalizerRun/mode=raw-2      10000  800 ns/op
BenchmarkFinalizerRun/mode=watched-2  10000  1000 ns/op
BenchmarkOverflow/site=intable-2   1000  100 ns/op
BenchmarkOverflow/site=overflow-2  1000  104 ns/op
BenchmarkOverflow/site=intable-2   1000  100 ns/op
BenchmarkOverflow/site=overflow-2  1000  110 ns/op
BenchmarkProfile/sites=1000-2   10  900000 ns/op
BenchmarkProfile/sites=10000-2  10  12000000 ns/op
`

func TestMicroRows(t *testing.T) {
	s := samples{}
	if err := s.parse(strings.NewReader(micro)); err != nil {
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
		// Per round 1.25× and 1.364×: median 1.307×.
		{"SetFinalizer setclear, default (stacks sampled)", (1.25 + 300.0/220) / 2, "MISSED by 0.5% (rounds on both sides)"},
		{"SetFinalizer setclear, full stacks", (2.5 + 400.0/220) / 2, "MISSED by 8.0% (rounds on both sides)"},
		// Per round +80 and +200 ns.
		{"finalizer run, end to end, added per object", 140, "MISSED by 40.0ns (rounds on both sides)"},
		// Per round 1.04× and 1.10×.
		{"SetFinalizer setclear, overflow site vs in-table", 1.07, "MISSED by 1.9% (rounds on both sides)"},
		{"pprof profile sites=1000", 900000, "met"},
		{"pprof profile sites=10000", 12e6, "MISSED by 2.00ms"},
	} {
		r, ok := byLabel[tt.label]
		if !ok {
			t.Fatalf("no row %q", tt.label)
		}
		_, _, v, _, _, verdict := r.evaluate(s, nil)
		if math.Abs(v-tt.want) > 1e-9 || verdict != tt.verdict {
			t.Errorf("%s: %v, %q; want %v, %q", tt.label, v, verdict, tt.want, tt.verdict)
		}
	}
	var b strings.Builder
	if err := write(&b, rows(), s, nil); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if !strings.Contains(out, "overflow site vs in-table") {
		t.Errorf("table lacks the overflow row:\n%s", out)
	}
}

// benchstatCSV is what `benchstat -format csv -col /mode` prints for the
// operator suite (trimmed to two tables).
const benchstatCSV = `goos: linux
pkg: x
,raw,,default,,,,full,,,
,reconciles/s,CI,reconciles/s,CI,vs base,P,reconciles/s,CI,vs base,P
Operator-2,1002.5,1%,1000,2%,~,p=0.292 n=6,911,1%,-9.13%,p=0.002 n=6
geomean,1002.5000000000002,,999.9999999999998,,-0.25%,,910.9999999999999,,-9.13%,

,raw,,default,,,,full,,,
,p99-sec,CI,p99-sec,CI,vs base,P,p99-sec,CI,vs base,P
Operator-2,1.025e-08,2%,1.1250000000000001e-08,2%,+9.76%,p=0.002 n=6,2.2500000000000003e-08,11%,+119.51%,p=0.002 n=6
geomean,1.0250000000000016e-08,,1.1249999999999985e-08,,+9.76%,,2.250000000000001e-08,,+119.51%,

,raw,,default,,,,full,,,
,cpu-sec/reconcile,CI,cpu-sec/reconcile,CI,vs base,P,cpu-sec/reconcile,CI,vs base,P
Operator-2,2.0050000000000003e-07,1%,2.065e-07,2%,+2.99%,p=0.041 n=6,3.0550000000000003e-07,2%,~,p=0.180 n=6
`

func TestBenchstatVerdicts(t *testing.T) {
	sg := sigs{}
	if err := sg.parse(strings.NewReader(benchstatCSV)); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, unit string
		want       sig
	}{
		{"Operator/mode=default", "reconciles/s", sig{"p=0.292", false}},
		{"Operator/mode=full", "reconciles/s", sig{"p=0.002", true}},
		{"Operator/mode=default", "p99-ns", sig{"p=0.002", true}},
		{"Operator/mode=default", "cpu-ns/reconcile", sig{"p=0.041", true}},
		{"Operator/mode=full", "cpu-ns/reconcile", sig{"p=0.180", false}},
	} {
		if got, ok := sg[key{tt.name, tt.unit}]; !ok || got != tt.want {
			t.Errorf("%s %s: %+v %v, want %+v", tt.name, tt.unit, got, ok, tt.want)
		}
	}
	if len(sg) != 6 {
		t.Errorf("%d verdicts, want 6: %v", len(sg), sg)
	}

	s := samples{}
	if err := s.parse(strings.NewReader(sample)); err != nil {
		t.Fatal(err)
	}
	byLabel := map[string]row{}
	for _, r := range rows() {
		byLabel[r.label] = r
	}
	for _, tt := range []struct{ label, verdict string }{
		{"throughput, default", "not resolved (p=0.292): below what these runs tell apart"},
		{"throughput, full", "MISSED by 4.3% (p=0.002)"},
		{"p99 reconcile latency, default", "met (p=0.002)"},
		// No benchstat verdict for this row: as without the file.
		{"RSS added, full", ""},
	} {
		if _, _, _, _, _, verdict := byLabel[tt.label].evaluate(s, sg); verdict != tt.verdict {
			t.Errorf("%s: %q, want %q", tt.label, verdict, tt.verdict)
		}
	}
	var b strings.Builder
	if err := write(&b, rows(), s, sg); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "~ p=0.292") {
		t.Errorf("table lacks benchstat's column:\n%s", b.String())
	}
}
