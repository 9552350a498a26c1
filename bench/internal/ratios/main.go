// Command ratios reads Go benchmark output (the files bench/run.sh
// writes) and prints the overhead table: for each comparison the median of
// the probe's side, the median of the baseline, the median of the
// per-round ratios (or differences) with their range, the goal and whether
// that median meets it.
//
//	go run ./bench/internal/ratios micro.txt operator.txt sites.txt
//
// Medians of a few noisy runs are what it compares; benchstat, which
// run.sh prints beside it, says which differences are significant.
package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// samples holds every value of every (benchmark, unit) pair read.
type samples map[key][]float64

type key struct{ name, unit string }

// procSuffix is the -GOMAXPROCS suffix go test appends to benchmark names.
var procSuffix = regexp.MustCompile(`-\d+$`)

// parse adds the results in r to s. A result line is
// "BenchmarkName-P  N  v1 unit1  v2 unit2 ..."; other lines are ignored.
func (s samples) parse(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || len(f)%2 != 0 {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue
		}
		name := procSuffix.ReplaceAllString(strings.TrimPrefix(f[0], "Benchmark"), "")
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			k := key{name, f[i+1]}
			s[k] = append(s[k], v)
		}
	}
	return sc.Err()
}

// median returns the median of the samples of k and their number.
func (s samples) median(k key) (float64, int) {
	v := slices.Clone(s[k])
	if len(v) == 0 {
		return math.NaN(), 0
	}
	slices.Sort(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2], n
	}
	return (v[n/2-1] + v[n/2]) / 2, n
}

// How a row compares its two sides.
const (
	ratio = iota // probe / baseline
	delta        // probe - baseline
	value        // probe alone
)

// row is one line of the table.
type row struct {
	section  string
	label    string
	probe    string // benchmark name, without "Benchmark" and the -P suffix
	baseline string // empty for a value row
	unit     string
	compare  int
	op       string // "<=", ">=", "==" or "" (no goal)
	goal     float64
}

// rows are the comparisons bench/run.sh reports, with the goals of the
// overhead issue.
func rows() []row {
	var rs []row
	for _, s := range []string{"setclear", "churn", "keepalive"} {
		rs = append(rs,
			row{"registration", "SetFinalizer " + s + ", default", "SetFinalizer/shape=" + s + "/mode=watched", "SetFinalizer/shape=" + s + "/mode=raw", "ns/op", ratio, "<=", 1.5},
			row{"registration", "SetFinalizer " + s + ", full stacks", "SetFinalizer/shape=" + s + "/mode=fullstacks", "SetFinalizer/shape=" + s + "/mode=raw", "ns/op", ratio, "<=", 3})
	}
	for _, s := range []string{"addstop", "churn", "keepalive"} {
		rs = append(rs,
			row{"registration", "AddCleanup " + s + ", default", "AddCleanup/shape=" + s + "/mode=watched", "AddCleanup/shape=" + s + "/mode=raw", "ns/op", ratio, "<=", 1.5},
			row{"registration", "AddCleanup " + s + ", full stacks", "AddCleanup/shape=" + s + "/mode=fullstacks", "AddCleanup/shape=" + s + "/mode=raw", "ns/op", ratio, "<=", 3})
	}
	rs = append(rs,
		row{"callbacks", "finalizer run, end to end", "FinalizerRun/mode=watched", "FinalizerRun/mode=raw", "ns/op", ratio, "", 0},
		row{"callbacks", "cleanup run, end to end", "CleanupRun/mode=watched", "CleanupRun/mode=raw", "ns/op", ratio, "", 0},
		row{"readers", "sampler round vs Go collector gather", "SamplerRound", "Gather/collector=go", "ns/op", ratio, "", 0},
	)
	for _, l := range []string{"sites=1", "sites=1000", "sites=10000", "stacks=10000"} {
		rs = append(rs, row{"readers", "gcprobe gather " + l + " vs Go collector gather", "Gather/collector=gcprobe/" + l, "Gather/collector=go", "ns/op", ratio, "", 0})
	}
	for _, l := range []string{"sites=1", "sites=1000", "sites=10000", "stacks=10000"} {
		rs = append(rs, row{"readers", "pprof profile " + l, "Profile/" + l, "", "ns/op", value, "", 0})
	}
	for _, m := range []string{"default", "full"} {
		tput := row{"operator", "throughput, " + m, "Operator/mode=" + m, "Operator/mode=raw", "reconciles/s", ratio, "", 0}
		p99 := row{"operator", "p99 reconcile latency, " + m, "Operator/mode=" + m, "Operator/mode=raw", "p99-ns", ratio, "", 0}
		if m == "default" {
			tput.op, tput.goal = ">=", 0.98
			p99.op, p99.goal = "<=", 1.05
		} else {
			tput.op, tput.goal = ">=", 0.95
		}
		stw := row{"operator", "non-GC stop-the-world pauses, " + m, "Operator/mode=" + m, "", "stw-other", value, "", 0}
		if m == "default" {
			stw.op, stw.goal = "==", 0
		}
		rs = append(rs, tput, p99,
			row{"operator", "p50 reconcile latency, " + m, "Operator/mode=" + m, "Operator/mode=raw", "p50-ns", ratio, "", 0},
			row{"operator", "CPU per reconcile, " + m, "Operator/mode=" + m, "Operator/mode=raw", "cpu-ns/reconcile", ratio, "", 0},
			row{"operator", "GC pause p99, " + m, "Operator/mode=" + m, "Operator/mode=raw", "gc-pause-p99-ns", ratio, "", 0},
			row{"operator", "RSS, " + m, "Operator/mode=" + m, "Operator/mode=raw", "rss-MiB", ratio, "", 0},
			row{"operator", "RSS added, " + m, "Operator/mode=" + m, "Operator/mode=raw", "rss-MiB", delta, "", 0},
			stw)
	}
	for _, l := range []string{"sites=10000", "stacks=10000"} {
		rs = append(rs,
			row{"memory", "RSS added at " + l, "SitesRSS/" + l + "/mode=probe", "SitesRSS/" + l + "/mode=none", "rss-MiB", delta, "<=", 5},
			row{"memory", "heap added at " + l, "SitesRSS/" + l + "/mode=probe", "SitesRSS/" + l + "/mode=none", "heap-MiB", delta, "", 0},
		)
	}
	return rs
}

// paired compares the probe's i-th sample with the baseline's i-th:
// bench/run.sh writes them in rounds (one -count iteration of the micro
// benchmarks runs every mode in turn; one operator round runs every mode
// once), so the i-th samples of two modes ran side by side, under the same
// load. It returns the median, least and greatest of the per-round
// comparisons, or ok false if the two sides have different numbers of
// samples.
func (s samples) paired(r row) (med, lo, hi float64, ok bool) {
	ps, bs := s[key{r.probe, r.unit}], s[key{r.baseline, r.unit}]
	if len(ps) == 0 || len(ps) != len(bs) {
		return 0, 0, 0, false
	}
	vs := make([]float64, len(ps))
	for i := range ps {
		if r.compare == ratio {
			vs[i] = ps[i] / bs[i]
		} else {
			vs[i] = ps[i] - bs[i]
		}
	}
	ss := samples{key{}: vs}
	med, _ = ss.median(key{})
	return med, slices.Min(vs), slices.Max(vs), true
}

// evaluate returns the row's probe and baseline medians, the compared
// value, the sample counts, and the verdict. The compared value is the
// median of the paired per-round comparisons where the rounds pair up
// (see paired), which cancels the machine's drift better than comparing
// the two medians; otherwise the medians' ratio or difference.
func (r row) evaluate(s samples) (p, b, v float64, np, nb int, verdict string) {
	p, np = s.median(key{r.probe, r.unit})
	b, nb = math.NaN(), 0
	switch r.compare {
	case ratio:
		b, nb = s.median(key{r.baseline, r.unit})
		v = p / b
	case delta:
		b, nb = s.median(key{r.baseline, r.unit})
		v = p - b
	default:
		v = p
	}
	lo, hi, isPaired := 0.0, 0.0, false
	if r.compare != value {
		var med float64
		if med, lo, hi, isPaired = s.paired(r); isPaired {
			v = med
		}
	}
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return p, b, v, np, nb, "no data"
	case r.op == "":
		return p, b, v, np, nb, ""
	}
	meets := func(x float64) bool {
		return r.op == "<=" && x <= r.goal || r.op == ">=" && x >= r.goal || r.op == "==" && x == r.goal
	}
	// Rounds on both sides of the goal: the verdict is the noise's.
	noisy := ""
	if isPaired && meets(lo) != meets(hi) {
		noisy = " (rounds on both sides)"
	}
	switch {
	case meets(v):
		return p, b, v, np, nb, "met" + noisy
	case r.compare == ratio:
		return p, b, v, np, nb, fmt.Sprintf("MISSED by %.1f%%%s", 100*math.Abs(v/r.goal-1), noisy)
	default:
		return p, b, v, np, nb, fmt.Sprintf("MISSED by %s%s", format(math.Abs(v-r.goal), r.unit), noisy)
	}
}

// format prints v in unit for a reader: durations scaled, sizes in MiB.
func format(v float64, unit string) string {
	if math.IsNaN(v) {
		return "-"
	}
	switch {
	case unit == "ns/op" || strings.HasSuffix(unit, "-ns") || strings.HasPrefix(unit, "cpu-ns"):
		switch a := math.Abs(v); {
		case a >= 1e9:
			return fmt.Sprintf("%.2fs", v/1e9)
		case a >= 1e6:
			return fmt.Sprintf("%.2fms", v/1e6)
		case a >= 1e3:
			return fmt.Sprintf("%.2fµs", v/1e3)
		}
		return fmt.Sprintf("%.1fns", v)
	case unit == "rss-MiB" || unit == "heap-MiB":
		return fmt.Sprintf("%.1f MiB", v)
	case unit == "reconciles/s":
		return fmt.Sprintf("%.0f/s", v)
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

func (r row) goalString() string {
	if r.op == "" {
		return ""
	}
	switch r.compare {
	case ratio:
		return fmt.Sprintf("%s %g×", r.op, r.goal)
	case delta:
		return fmt.Sprintf("%s +%s", r.op, format(r.goal, r.unit))
	}
	return fmt.Sprintf("%s %g", r.op, r.goal)
}

// write prints the table of rs over s, leaving out the rows s has no
// sample for (a suite that did not run).
func write(w io.Writer, rs []row, s samples) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	section := ""
	for _, r := range rs {
		if len(s[key{r.probe, r.unit}]) == 0 && len(s[key{r.baseline, r.unit}]) == 0 {
			continue
		}
		if r.section != section {
			section = r.section
			fmt.Fprintf(tw, "\n%s\tprobe\tbaseline\tprobe/baseline\tper-round range\tgoal\tverdict\tn\t\n", strings.ToUpper(section))
		}
		p, b, v, np, nb, verdict := r.evaluate(s)
		var cmp string
		switch r.compare {
		case ratio:
			cmp = fmt.Sprintf("%.3f×", v)
		case delta:
			cmp = "+" + format(v, r.unit)
			if v < 0 {
				cmp = format(v, r.unit)
			}
		default:
			cmp = format(v, r.unit)
		}
		if math.IsNaN(v) || math.IsInf(v, 0) {
			cmp = "-"
		}
		spread := ""
		if _, lo, hi, ok := s.paired(r); ok && r.compare == ratio {
			spread = fmt.Sprintf("%.2f–%.2f", lo, hi)
		} else if ok {
			spread = format(lo, r.unit) + " – " + format(hi, r.unit)
		}
		n := strconv.Itoa(np)
		if r.compare != value {
			n += "/" + strconv.Itoa(nb)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.label, format(p, r.unit), format(b, r.unit), cmp, spread, r.goalString(), verdict, n)
	}
	return tw.Flush()
}

func main() {
	s := samples{}
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: ratios file...")
		os.Exit(2)
	}
	for _, name := range os.Args[1:] {
		f, err := os.Open(name)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		err = s.parse(f)
		f.Close()
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
			os.Exit(1)
		}
	}
	if err := write(os.Stdout, rows(), s); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
