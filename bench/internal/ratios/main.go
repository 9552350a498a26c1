// Command ratios reads Go benchmark output (the files bench/run.sh
// writes) and prints the overhead table: for each comparison the median of
// the probe's side, the median of the baseline, the median of the
// per-round ratios (or differences) with their range, the goal and whether
// that median meets it.
//
//	go run ./bench/internal/ratios micro.txt operator.txt sites.txt
//	go run ./bench/internal/ratios -benchstat operator.csv operator.txt
//
// Medians of a few noisy runs are what it compares; benchstat, which
// run.sh prints beside it, says which differences are significant. Given
// benchstat's CSV (-benchstat), the table shows its p-value for each
// comparison it covers, and the rows whose question is "is there a
// difference at all" (the operator's throughput, p99 latency and CPU) say
// "not resolved (p=…)" where benchstat finds none (its "~", p >= 0.05):
// with these rounds on this machine the difference, whatever its median,
// is below what can be told from noise.
package main

import (
	"bufio"
	"encoding/csv"
	"flag"
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
	// resolve rows take benchstat's verdict (see sigs): where it finds no
	// significant difference, the row says so instead of met or missed.
	resolve bool
}

// Goals of the overhead issue, where the ledger's rebuild (the read model
// and the hot path) set them anew: SetFinalizer's churn and keep-alive,
// AddCleanup's add+stop and the RSS at 10 000 sites.
const (
	registrationGoal = 1.3  // × raw, each shape, default options (sampled stacks), but for:
	keepChurnGoal    = 1.25 // SetFinalizer churn and keep-alive
	addStopGoal      = 1.45 // AddCleanup add+stop
	fullStacksGoal   = 2    // × raw, each shape, a full stack on every registration
	runDeltaGoal     = 100  // ns added per object, finalizer or cleanup run end to end
	gatherGoal       = 1    // gcprobe's Collect × the Go collector's Gather, at 300, 1 000 and 10 000 sites
	rssGoal          = 6    // MiB added with 10 000 tracked sites
	overflowGoal     = 1.05 // × in-table: no slower, within a 5 % noise margin
)

// rows are the comparisons bench/run.sh reports, with the goals of the
// overhead issue.
func rows() []row {
	var rs []row
	reg := func(fn, shape string) {
		base := fn + "/shape=" + shape + "/mode=raw"
		goal := registrationGoal
		switch fn + "/" + shape {
		case "SetFinalizer/churn", "SetFinalizer/keepalive":
			goal = keepChurnGoal
		case "AddCleanup/addstop":
			goal = addStopGoal
		}
		rs = append(rs,
			row{section: "registration", label: fn + " " + shape + ", default (stacks sampled)", probe: fn + "/shape=" + shape + "/mode=watched", baseline: base, unit: "ns/op", compare: ratio, op: "<=", goal: goal},
			row{section: "registration", label: fn + " " + shape + ", full stacks", probe: fn + "/shape=" + shape + "/mode=fullstacks", baseline: base, unit: "ns/op", compare: ratio, op: "<=", goal: fullStacksGoal})
	}
	for _, s := range []string{"setclear", "churn", "keepalive"} {
		reg("SetFinalizer", s)
	}
	for _, s := range []string{"addstop", "churn", "keepalive"} {
		reg("AddCleanup", s)
	}
	rs = append(rs,
		row{section: "registration", label: "SetFinalizer setclear, overflow site vs in-table", probe: "Overflow/site=overflow", baseline: "Overflow/site=intable", unit: "ns/op", compare: ratio, op: "<=", goal: overflowGoal},
		row{section: "callbacks", label: "finalizer run, end to end, added per object", probe: "FinalizerRun/mode=watched", baseline: "FinalizerRun/mode=raw", unit: "ns/op", compare: delta, op: "<=", goal: runDeltaGoal},
		row{section: "callbacks", label: "finalizer run, end to end", probe: "FinalizerRun/mode=watched", baseline: "FinalizerRun/mode=raw", unit: "ns/op", compare: ratio},
		row{section: "callbacks", label: "cleanup run, end to end, added per object", probe: "CleanupRun/mode=watched", baseline: "CleanupRun/mode=raw", unit: "ns/op", compare: delta, op: "<=", goal: runDeltaGoal},
		row{section: "callbacks", label: "cleanup run, end to end", probe: "CleanupRun/mode=watched", baseline: "CleanupRun/mode=raw", unit: "ns/op", compare: ratio},
		row{section: "readers", label: "sampler round vs Go collector gather", probe: "SamplerRound", baseline: "Gather/collector=go", unit: "ns/op", compare: ratio},
	)
	// The issue measures the collector's own work, its Collect, against
	// the Go collector's whole Gather; the whole gcprobe Gather, which adds
	// client_golang's per-series work, is reported beside it.
	for _, l := range []string{"sites=1", "sites=300", "sites=1000", "sites=10000", "stacks=10000"} {
		r := row{section: "readers", label: "gcprobe collect " + l + " vs Go collector gather", probe: "Collect/collector=gcprobe/" + l, baseline: "Gather/collector=go", unit: "ns/op", compare: ratio}
		if strings.HasPrefix(l, "sites=") && l != "sites=1" {
			r.op, r.goal = "<=", gatherGoal
		}
		rs = append(rs, r,
			row{section: "readers", label: "gcprobe gather " + l + " vs Go collector gather", probe: "Gather/collector=gcprobe/" + l, baseline: "Gather/collector=go", unit: "ns/op", compare: ratio})
	}
	for _, p := range []struct {
		l    string
		goal float64 // ns; 0 for none
	}{{"sites=1", 0}, {"sites=300", 0}, {"sites=1000", 1e6}, {"sites=10000", 10e6}, {"stacks=10000", 15e6}} {
		r := row{section: "readers", label: "pprof profile " + p.l, probe: "Profile/" + p.l, unit: "ns/op", compare: value}
		if p.goal > 0 {
			r.op, r.goal = "<=", p.goal
		}
		rs = append(rs, r)
	}
	for _, m := range []string{"default", "full"} {
		probe := "Operator/mode=" + m
		tput := row{section: "operator", label: "throughput, " + m, probe: probe, baseline: "Operator/mode=raw", unit: "reconciles/s", compare: ratio, resolve: true}
		p99 := row{section: "operator", label: "p99 reconcile latency, " + m, probe: probe, baseline: "Operator/mode=raw", unit: "p99-ns", compare: ratio, resolve: true}
		if m == "default" {
			tput.op, tput.goal = ">=", 0.98
			p99.op, p99.goal = "<=", 1.05
		} else {
			tput.op, tput.goal = ">=", 0.95
		}
		stw := row{section: "operator", label: "non-GC stop-the-world pauses, " + m, probe: probe, unit: "stw-other", compare: value}
		if m == "default" {
			stw.op, stw.goal = "==", 0
		}
		rs = append(rs, tput, p99,
			row{section: "operator", label: "p50 reconcile latency, " + m, probe: probe, baseline: "Operator/mode=raw", unit: "p50-ns", compare: ratio},
			row{section: "operator", label: "CPU per reconcile, " + m, probe: probe, baseline: "Operator/mode=raw", unit: "cpu-ns/reconcile", compare: ratio, resolve: true},
			row{section: "operator", label: "GC pause p99, " + m, probe: probe, baseline: "Operator/mode=raw", unit: "gc-pause-p99-ns", compare: ratio},
			row{section: "operator", label: "RSS, " + m, probe: probe, baseline: "Operator/mode=raw", unit: "rss-MiB", compare: ratio},
			row{section: "operator", label: "RSS added, " + m, probe: probe, baseline: "Operator/mode=raw", unit: "rss-MiB", compare: delta},
			stw)
	}
	for _, l := range []string{"sites=10000", "stacks=10000"} {
		r := row{section: "memory", label: "RSS added at " + l, probe: "SitesRSS/" + l + "/mode=probe", baseline: "SitesRSS/" + l + "/mode=none", unit: "rss-MiB", compare: delta}
		if l == "sites=10000" {
			r.op, r.goal = "<=", rssGoal
		}
		rs = append(rs, r,
			row{section: "memory", label: "heap added at " + l, probe: "SitesRSS/" + l + "/mode=probe", baseline: "SitesRSS/" + l + "/mode=none", unit: "heap-MiB", compare: delta},
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
//
// For a resolve row that benchstat found no significant difference in
// (sg, when known), the verdict is "not resolved" with benchstat's p-value:
// the difference, whichever side of the goal its median falls, is below
// what the runs could tell apart.
func (r row) evaluate(s samples, sg sigs) (p, b, v float64, np, nb int, verdict string) {
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
	}
	suffix := ""
	if bs, ok := sg[key{r.probe, r.unit}]; ok && r.resolve {
		if !bs.significant {
			return p, b, v, np, nb, "not resolved (" + bs.p + "): below what these runs tell apart"
		}
		if r.op == "" {
			return p, b, v, np, nb, "resolved (" + bs.p + ")"
		}
		suffix = " (" + bs.p + ")"
	}
	if r.op == "" {
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
		return p, b, v, np, nb, "met" + noisy + suffix
	case r.compare == ratio:
		return p, b, v, np, nb, fmt.Sprintf("MISSED by %.1f%%%s%s", 100*math.Abs(v/r.goal-1), noisy, suffix)
	default:
		return p, b, v, np, nb, fmt.Sprintf("MISSED by %s%s%s", format(math.Abs(v-r.goal), r.unit), noisy, suffix)
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
	return r.op + " " + format(r.goal, r.unit)
}

// write prints the table of rs over s, leaving out the rows s has no
// sample for (a suite that did not run). sg, which may be empty, adds benchstat's p-values.
func write(w io.Writer, rs []row, s samples, sg sigs) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	section := ""
	for _, r := range rs {
		if len(s[key{r.probe, r.unit}]) == 0 && len(s[key{r.baseline, r.unit}]) == 0 {
			continue
		}
		if r.section != section {
			section = r.section
			fmt.Fprintf(tw, "\n%s\tprobe\tbaseline\tprobe/baseline\tper-round range\tbenchstat\tgoal\tverdict\tn\t\n", strings.ToUpper(section))
		}
		p, b, v, np, nb, verdict := r.evaluate(s, sg)
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
		bs := ""
		if x, ok := sg[key{r.probe, r.unit}]; ok {
			bs = x.p
			if !x.significant {
				bs = "~ " + bs
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.label, format(p, r.unit), format(b, r.unit), cmp, spread, bs, r.goalString(), verdict, n)
	}
	return tw.Flush()
}

func main() {
	bsFile := flag.String("benchstat", "", "benchstat's verdicts: the output of `benchstat -format csv -col /mode` over some of the files")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: ratios [-benchstat file.csv] file...")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() < 1 {
		flag.Usage()
		os.Exit(2)
	}
	s := samples{}
	for _, name := range flag.Args() {
		if err := readFile(name, s.parse); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	sg := sigs{}
	if *bsFile != "" {
		if err := readFile(*bsFile, sg.parse); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	if err := write(os.Stdout, rows(), s, sg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func readFile(name string, parse func(io.Reader) error) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := parse(f); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// sig is benchstat's verdict on one comparison with the base column.
type sig struct {
	p           string // "p=0.031"
	significant bool   // benchstat printed a change, not "~"
}

// sigs holds benchstat's verdicts by the probe side's benchmark name and
// unit, as rows name them.
type sigs map[key]sig

// parse adds the verdicts of benchstat's CSV output (-format csv) in r,
// run with -col /mode: each table starts with a row of column names (the
// base mode, then each other mode over its columns) and a row of column
// titles (the unit, "CI", and for each mode but the base "vs base" and
// "P"), then a row per benchmark. The benchmark "Operator" in the column
// "default" is the probe side "Operator/mode=default".
func (sg sigs) parse(r io.Reader) error {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	var modes, titles []string
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		switch {
		case len(rec) < 2:
			// "goos: linux" and the like.
		case rec[0] == "" && slices.Contains(rec, "CI"):
			titles = rec
		case rec[0] == "":
			// Each mode's name heads the first of its columns.
			modes = slices.Clone(rec)
			for i := 1; i < len(modes); i++ {
				if modes[i] == "" {
					modes[i] = modes[i-1]
				}
			}
			titles = nil
		case rec[0] != "geomean" && len(titles) == len(rec) && len(modes) == len(rec):
			name := procSuffix.ReplaceAllString(rec[0], "")
			unit := ourUnit(titles[1])
			for i := 1; i+1 < len(rec); i++ {
				if titles[i] != "vs base" || titles[i+1] != "P" {
					continue
				}
				p, _, _ := strings.Cut(rec[i+1], " ")
				sg[key{name + "/mode=" + modes[i], unit}] = sig{p: p, significant: rec[i] != "~"}
			}
		}
	}
}

// ourUnit undoes benchstat's renaming of nanosecond units to seconds
// ("p99-ns" becomes "p99-sec", "cpu-ns/reconcile" "cpu-sec/reconcile").
func ourUnit(u string) string {
	if rest, ok := strings.CutPrefix(u, "sec/"); ok {
		return "ns/" + rest
	}
	return strings.Replace(u, "-sec", "-ns", 1)
}
