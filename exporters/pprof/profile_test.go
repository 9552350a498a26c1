package pprofexporter

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/internal/ledgertest"
	"github.com/gcprobe/probe/stackcapture"
	"github.com/google/pprof/profile"

	"github.com/gcprobe/probe/internal/testkit"
)

// writeParse writes the profile of w and parses it back.
func writeParse(t testing.TB, w *finalizerwatch.Watcher) (*profile.Profile, []byte) {
	t.Helper()
	var buf bytes.Buffer
	if err := Write(&buf, w); err != nil {
		t.Fatal(err)
	}
	p, err := profile.ParseData(buf.Bytes())
	if err != nil {
		t.Fatalf("ParseData: %v", err)
	}
	if err := p.CheckValid(); err != nil {
		t.Fatalf("CheckValid: %v", err)
	}
	return p, buf.Bytes()
}

// checkValues reports, as what, a value of s that differs from want, a
// value by sample type (the types want leaves out are not compared).
func checkValues(t *testing.T, p *profile.Profile, s *profile.Sample, what string, want map[string]int64) {
	t.Helper()
	got := map[string]int64{}
	for i, st := range p.SampleType {
		got[st.Type] = s.Value[i]
	}
	for typ, v := range want {
		if g, ok := got[typ]; !ok || g != v {
			t.Errorf("%s sample values %v, want %s %d", what, got, typ, v)
		}
	}
}

// sampleAt returns the sample whose innermost line is in function fn at
// line, or nil.
func sampleAt(p *profile.Profile, fn string, line int) *profile.Sample {
	for _, s := range p.Sample {
		if len(s.Location) == 0 || len(s.Location[0].Line) == 0 {
			continue
		}
		l := s.Location[0].Line[0]
		if l.Function.Name == fn && l.Line == int64(line) {
			return s
		}
	}
	return nil
}

func TestProfile(t *testing.T) {
	w := plantedWatcher(t)
	p, _ := writeParse(t, w)

	var types []string
	for _, st := range p.SampleType {
		types = append(types, st.Type+"/"+st.Unit)
	}
	// The summary counters of the ledger, in its order, then suspect,
	// growth, dropped and leaked; today's are named, so that the rule
	// cannot go unchecked.
	var want []string
	for _, c := range finalizerwatch.Counters() {
		if c.Summary {
			want = append(want, c.Name+"/count")
		}
	}
	want = append(want, "suspect/count", "growth/count", "dropped/count", "leaked/count")
	if !slices.Equal(types, want) {
		t.Errorf("sample types %v, want %v", types, want)
	}
	for _, typ := range []string{"registered/count", "executed/count", "outstanding/count", "suspect/count", "growth/count", "dropped/count", "leaked/count"} {
		if !slices.Contains(types, typ) {
			t.Errorf("sample types %v lack %s", types, typ)
		}
	}
	if p.DefaultSampleType != "leaked" {
		t.Errorf("default sample type %q, want leaked", p.DefaultSampleType)
	}
	if n := len(ledgertest.Entries(w)); len(p.Sample) != n {
		t.Errorf("%d samples, want one per ledger entry (%d)", len(p.Sample), n)
	}

	const pkg = "github.com/gcprobe/probe/exporters/pprof."
	leak := sampleAt(p, pkg+"plantLeak", testkit.MarkerLine(t, "main_test.go", "leak"))
	if leak == nil {
		t.Fatalf("no sample at the planted leak:\n%v", p)
	}
	// Planted once and kept: stable, so no growth.
	checkValues(t, p, leak, "leak", map[string]int64{SampleRegistered: 7, "executed": 0, SampleOutstanding: 7, SampleSuspect: 7, SampleGrowth: 0, SampleDropped: 0, SampleLeaked: 0})
	if got := leak.Label[LabelKind]; !slices.Equal(got, []string{"finalizer"}) {
		t.Errorf("leak sample kind %v, want [finalizer]", got)
	}
	if !strings.HasSuffix(leak.Location[0].Line[0].Function.Filename, "main_test.go") {
		t.Errorf("leak sample file %q", leak.Location[0].Line[0].Function.Filename)
	}
	// The stack goes on up to the test that planted it.
	var fns []string
	for _, l := range leak.Location {
		fns = append(fns, l.Line[0].Function.Name)
	}
	if !slices.Contains(fns, pkg+"plantedWatcher") {
		t.Errorf("leak stack %v lacks plantedWatcher", fns)
	}

	churn := sampleAt(p, pkg+"churn", testkit.MarkerLine(t, "main_test.go", "churn"))
	if churn == nil {
		t.Fatal("no sample at the churn")
	}
	checkValues(t, p, churn, "churn", map[string]int64{SampleRegistered: 50, "executed": 50, SampleOutstanding: 0, SampleSuspect: 0, SampleGrowth: 0})
	if got := churn.Label[LabelKind]; !slices.Equal(got, []string{"cleanup"}) {
		t.Errorf("churn sample kind %v, want [cleanup]", got)
	}

	// Functions and locations are shared, never repeated.
	funcs := map[[2]string]bool{}
	for _, f := range p.Function {
		k := [2]string{f.Name, f.Filename}
		if funcs[k] {
			t.Errorf("function %v appears twice", k)
		}
		funcs[k] = true
	}
	type locKey struct {
		addr uint64
		fn   string
		line int64
	}
	locs := map[locKey]bool{}
	for _, l := range p.Location {
		k := locKey{l.Address, l.Line[0].Function.Name, l.Line[0].Line}
		if locs[k] {
			t.Errorf("location %v appears twice", k)
		}
		locs[k] = true
	}

	// Nothing but code locations and counts: the only label is kind.
	for _, s := range p.Sample {
		if len(s.Label) != 1 || len(s.NumLabel) != 0 {
			t.Errorf("sample labels %v %v, want only %s", s.Label, s.NumLabel, LabelKind)
		}
	}
	if len(p.Comments) != 0 || len(p.Mapping) != 0 {
		t.Errorf("profile carries comments %v or mappings %v", p.Comments, p.Mapping)
	}
}

func TestProfileOverflowEntry(t *testing.T) {
	// One site fits; the others overflow into an entry with no stack and
	// no PC, which gets a synthetic address.
	w, err := finalizerwatch.New(finalizerwatch.WithMaxSites(1))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	t.Cleanup(func() { kept = nil })
	plantLeak(w, 2)
	churn(w, 3)
	p, _ := writeParse(t, w)
	var overflow *profile.Sample
	for _, s := range p.Sample {
		if s.Location[0].Line[0].Function.Name == "gcprobe.overflow" {
			overflow = s
		}
	}
	if overflow == nil {
		t.Fatalf("no overflow sample:\n%v", p)
	}
	checkValues(t, p, overflow, "overflow", map[string]int64{SampleRegistered: 3})
	if len(overflow.Location) != 1 || overflow.Location[0].Address == 0 {
		t.Errorf("overflow sample at %v, want one synthetic location", overflow.Location)
	}
}

func TestBuilderWithoutPCs(t *testing.T) {
	b := newBuilder(ledgerTypes, SampleGrowth)
	defer b.release()
	f := func(fn string, line int) stackcapture.Frame {
		return stackcapture.Frame{Function: fn, File: "/src/app/a.go", Line: line}
	}
	// Values for every sample type, the first ones given.
	values := func(v ...int64) []int64 { return append(v, make([]int64, len(ledgerTypes)-len(v))...) }
	b.addFrames(finalizerwatch.KindFinalizer, []stackcapture.Frame{f("app.a", 1), f("app.main", 9)}, values(1, 0, 2))
	b.addFrames(finalizerwatch.KindCleanup, []stackcapture.Frame{f("app.b", 2), f("app.main", 9)}, values(0, 0, 1))
	b.addFrames(finalizerwatch.KindCleanup, []stackcapture.Frame{f("", 0)}, values()) // no stack, unknown site
	p := b.decode()
	if err := p.CheckValid(); err != nil {
		t.Fatal(err)
	}
	if len(p.Location) != 4 || len(p.Function) != 4 {
		t.Fatalf("%d locations, %d functions; want 4 and 4 (app.main shared)", len(p.Location), len(p.Function))
	}
	addrs := map[uint64]bool{}
	for _, l := range p.Location {
		if l.Address == 0 || addrs[l.Address] {
			t.Errorf("synthetic address %#x zero or repeated", l.Address)
		}
		addrs[l.Address] = true
	}
	if got := p.Sample[2].Location[0].Line[0].Function.Name; got != "unknown" {
		t.Errorf("frame without a function named %q, want unknown", got)
	}
}

// TestEncodingMatchesProfilePackage: what the builder encodes, decoded
// and encoded again by the profile package, decodes to the same profile;
// and a second profile made by a pooled builder is the same as the first.
func TestEncodingMatchesProfilePackage(t *testing.T) {
	w := plantedWatcher(t)
	p := Profile(w)
	if err := p.CheckValid(); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := p.Write(&buf); err != nil {
		t.Fatal(err)
	}
	q, err := profile.ParseData(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	q.TimeNanos = p.TimeNanos
	if got, want := q.String(), p.String(); got != want {
		t.Errorf("re-encoded by the profile package:\n%s\nwant\n%s", got, want)
	}
	again := Profile(w)
	again.TimeNanos = p.TimeNanos
	if got, want := again.String(), p.String(); got != want {
		t.Errorf("second profile:\n%s\nwant\n%s", got, want)
	}
	if len(p.Sample) == 0 || len(p.Location) == 0 || len(p.Function) == 0 || p.TimeNanos == 0 {
		t.Errorf("profile with %d samples, %d locations, %d functions, time %d", len(p.Sample), len(p.Location), len(p.Function), p.TimeNanos)
	}
}

func TestVarints(t *testing.T) {
	for _, v := range []uint64{0, 1, 127, 128, 16383, 16384, 1<<63 - 1, 1 << 63, ^uint64(0)} {
		b := appendVarint(nil, v)
		if len(b) != varintLen(v) {
			t.Errorf("varint of %d: %d bytes, varintLen says %d", v, len(b), varintLen(v))
		}
		var got uint64
		for i, c := range b {
			got |= uint64(c&0x7f) << (7 * i)
		}
		if got != v {
			t.Errorf("varint of %d decodes to %d", v, got)
		}
	}
}

// TestGoToolPprof opens the profile with go tool pprof, as a user would.
func TestGoToolPprof(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go tool pprof")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	w := plantedWatcher(t)
	_, data := writeParse(t, w)
	file := filepath.Join(t.TempDir(), "finalizers.pb.gz")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, index := range []string{"outstanding", "suspect", "registered"} {
		cmd := exec.Command(goTool, "tool", "pprof", "-top", "-sample_index="+index, file)
		cmd.Env = append(os.Environ(), "PPROF_TMPDIR="+t.TempDir())
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go tool pprof -top -sample_index=%s: %v\n%s", index, err, out)
		}
		if !strings.Contains(string(out), "github.com/gcprobe/probe/exporters/pprof.plantLeak") {
			t.Errorf("go tool pprof -top -sample_index=%s does not name the planted leak:\n%s", index, out)
		}
		if index == "outstanding" && !strings.Contains(string(out), "Type: outstanding") {
			t.Errorf("go tool pprof does not report the outstanding sample type:\n%s", out)
		}
	}
}

// The profile's default view (leaked) names a growing leak's line first
// and leaves out a stable pool a hundred times its size.
func TestDefaultSampleShowsGrowingLeak(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go tool pprof")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	old := debug.SetGCPercent(-1) // one cycle per step, forced
	t.Cleanup(func() { debug.SetGCPercent(old) })
	t.Cleanup(func() { kept = nil })
	w, err := finalizerwatch.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	plantLeak(w, 700) // a pool, filled once
	for k := uint64(1); k <= 6; k++ {
		growLeak(w, 3)
		runtime.GC()
		// testkit.Poll, not AwaitGC: one cycle per step, the one forced above.
		testkit.Poll(t, 30*time.Second, fmt.Sprintf("both clocks at %d", k), ledgertest.ClocksAt(w, k))
		ledgertest.Sites(w) // one observation per cycle, as a scrape would make
	}
	p, data := writeParse(t, w)
	const pkg = "github.com/gcprobe/probe/exporters/pprof."
	leakLine := testkit.MarkerLine(t, "profile_test.go", "grow")
	leak := sampleAt(p, pkg+"growLeak", leakLine)
	pool := sampleAt(p, pkg+"plantLeak", testkit.MarkerLine(t, "main_test.go", "leak"))
	if leak == nil || pool == nil {
		t.Fatalf("no sample at the leak or the pool:\n%v", p)
	}
	// After 6 cycles the leak's registrations of steps 1-4 are suspects;
	// the window of 4 observations saw it gain 3 at each of the last 4.
	checkValues(t, p, leak, "leak", map[string]int64{SampleRegistered: 18, "executed": 0, SampleOutstanding: 18, SampleSuspect: 12, SampleGrowth: 12, SampleLeaked: 12})
	checkValues(t, p, pool, "pool", map[string]int64{SampleLeaked: 0})
	checkValues(t, p, pool, "pool", map[string]int64{SampleRegistered: 700, "executed": 0, SampleOutstanding: 700, SampleSuspect: 700, SampleGrowth: 0})
	file := filepath.Join(t.TempDir(), "finalizers.pb.gz")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(goTool, "tool", "pprof", "-top", "-lines", file)
	cmd.Env = append(os.Environ(), "PPROF_TMPDIR="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go tool pprof -top -lines: %v\n%s", err, out)
	}
	// The first row of the table is the leak's line; the pool has none.
	rows := strings.SplitAfter(string(out), "flat  flat%   sum%        cum   cum%\n")
	if len(rows) != 2 {
		t.Fatalf("no table in go tool pprof -top -lines:\n%s", out)
	}
	first, _, _ := strings.Cut(rows[1], "\n")
	if !strings.Contains(first, pkg+"growLeak") || !strings.Contains(first, "profile_test.go:"+strconv.Itoa(leakLine)) {
		t.Errorf("go tool pprof -top -lines: first row %q, want the leak's file:line\n%s", first, out)
	}
	if strings.Contains(rows[1], "main_test.go:"+strconv.Itoa(testkit.MarkerLine(t, "main_test.go", "leak"))) {
		t.Errorf("go tool pprof -top -lines lists the stable pool:\n%s", out)
	}
}

// gotoolTop runs go tool pprof -top -lines (and args) on the profile
// data, and returns the rows of its table; it skips in -short or without
// a go command.
func goToolTop(t *testing.T, data []byte, args ...string) (out string, rows []string) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs go tool pprof")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	file := filepath.Join(t.TempDir(), "finalizers.pb.gz")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(goTool, append(append([]string{"tool", "pprof", "-top", "-lines"}, args...), file)...)
	cmd.Env = append(os.Environ(), "PPROF_TMPDIR="+t.TempDir())
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go tool pprof -top -lines %v: %v\n%s", args, err, b)
	}
	out = string(b)
	_, table, ok := strings.Cut(out, "flat  flat%   sum%        cum   cum%\n")
	if !ok {
		t.Fatalf("no table in go tool pprof -top -lines %v:\n%s", args, out)
	}
	return out, strings.Split(strings.TrimSpace(table), "\n")
}

// TestDroppedSample: a line that dropped files without Close (churn to
// the growth model: its finalizers ran) is a sample with dropped and
// leaked, and the profile's default view lists it, beside a growing
// line (by its suspects), and leaves out a stable pool and a churning
// line that dropped nothing; -sample_index=dropped lists it alone.
func TestDroppedSample(t *testing.T) {
	site := func(fn string, line int) stackcapture.Frame {
		return stackcapture.Frame{Function: "example.com/app." + fn, File: "/src/app/" + fn + ".go", Line: line}
	}
	entries := []finalizerwatch.Entry{
		{Kind: finalizerwatch.KindFinalizer, Site: site("openFiles", 613), Class: finalizerwatch.ClassChurn,
			Counts: finalizerwatch.Counts{Registered: 287000, Executed: 286990, Dropped: 286990, Outstanding: 10}},
		{Kind: finalizerwatch.KindCleanup, Site: site("sessions", 20), Class: finalizerwatch.ClassGrowing, Growth: 40, Suspect: 61000,
			Counts: finalizerwatch.Counts{Registered: 62000, Outstanding: 62000}},
		{Kind: finalizerwatch.KindFinalizer, Site: site("pool", 30), Class: finalizerwatch.ClassStable, Suspect: 700,
			Counts: finalizerwatch.Counts{Registered: 700, Outstanding: 700}},
		{Kind: finalizerwatch.KindFinalizer, Site: site("churn", 40), Class: finalizerwatch.ClassChurn,
			Counts: finalizerwatch.Counts{Registered: 5000, Executed: 5000}},
	}
	b := entriesBuilder(entries)
	var buf bytes.Buffer
	err := b.writeGzipped(&buf, "profile")
	b.release()
	if err != nil {
		t.Fatal(err)
	}
	p, err := profile.ParseData(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if err := p.CheckValid(); err != nil {
		t.Fatal(err)
	}
	files := sampleAt(p, "example.com/app.openFiles", 613)
	grows := sampleAt(p, "example.com/app.sessions", 20)
	if files == nil || grows == nil {
		t.Fatalf("no sample at the dropped files or the growing line:\n%v", p)
	}
	checkValues(t, p, files, "dropped files", map[string]int64{SampleRegistered: 287000, SampleOutstanding: 10, SampleGrowth: 0, SampleDropped: 286990, SampleLeaked: 286990})
	checkValues(t, p, grows, "growing", map[string]int64{SampleGrowth: 40, SampleSuspect: 61000, SampleDropped: 0, SampleLeaked: 61000})

	// The default view: both leaks, the files first (the larger), and
	// nothing else.
	out, rows := goToolTop(t, buf.Bytes())
	if !strings.Contains(out, "Type: leaked") {
		t.Errorf("go tool pprof -top's sample type is not leaked:\n%s", out)
	}
	if len(rows) != 2 || !strings.Contains(rows[0], "example.com/app.openFiles /src/app/openFiles.go:613") ||
		!strings.Contains(rows[1], "example.com/app.sessions /src/app/sessions.go:20") {
		t.Errorf("go tool pprof -top -lines lists %q, want the dropped files' line, then the growing one\n%s", rows, out)
	}
	// Each view of its own: dropped lists the files alone, growth the
	// growing line alone.
	for _, tt := range []struct{ index, want string }{
		{"dropped", "example.com/app.openFiles /src/app/openFiles.go:613"},
		{"growth", "example.com/app.sessions /src/app/sessions.go:20"},
	} {
		out, rows := goToolTop(t, buf.Bytes(), "-sample_index="+tt.index)
		if len(rows) != 1 || !strings.Contains(rows[0], tt.want) || !strings.HasPrefix(strings.TrimSpace(rows[0]), map[string]string{"dropped": "286990", "growth": "40"}[tt.index]) {
			t.Errorf("go tool pprof -top -lines -sample_index=%s lists %q, want %s alone\n%s", tt.index, rows, tt.want, out)
		}
	}
}

// A profile in which nothing leaks has an empty default view.
func TestLeakedSampleEmptyWithoutLeak(t *testing.T) {
	b := entriesBuilder([]finalizerwatch.Entry{{Kind: finalizerwatch.KindFinalizer, Class: finalizerwatch.ClassStable, Suspect: 700,
		Site: stackcapture.Frame{Function: "example.com/app.pool", File: "/src/app/pool.go", Line: 30}, Counts: finalizerwatch.Counts{Registered: 700, Outstanding: 700}}})
	var buf bytes.Buffer
	err := b.writeGzipped(&buf, "profile")
	b.release()
	if err != nil {
		t.Fatal(err)
	}
	out, rows := goToolTop(t, buf.Bytes())
	if len(rows) != 1 || rows[0] != "" {
		t.Errorf("go tool pprof -top lists %q where nothing leaks\n%s", rows, out)
	}
}

// entryLeaked saturates rather than wraps.
func TestEntryLeakedSaturates(t *testing.T) {
	e := finalizerwatch.Entry{Class: finalizerwatch.ClassGrowing, Suspect: 1 << 63, Counts: finalizerwatch.Counts{Dropped: 1 << 63}}
	if got := entryLeaked(&e); got != 1<<64-1 {
		t.Errorf("entryLeaked = %d, want the largest uint64", got)
	}
}

func growLeak(w *finalizerwatch.Watcher, n int) {
	for range n {
		o := new(obj)
		w.SetFinalizer(o, finalizeObj) // marker: grow
		kept = append(kept, o)
	}
}

// A return PC that symbolizes to no frame at all gives no location, last
// in its stack or not, rather than a panic.
func TestRetLocsWithoutFrames(t *testing.T) {
	var r retLocs
	for _, next := range []uintptr{0, 0x1234} {
		if got := r.forNext(next); len(got) != 0 {
			t.Errorf("forNext(%#x) = %v, want none", next, got)
		}
	}
	r = retLocs{locs: []uint64{3, 2, 1}, caller: 0x1234}
	if got := r.forNext(0x1234); !slices.Equal(got, []uint64{3}) {
		t.Errorf("followed by its caller's virtual PC: %v, want the innermost location only", got)
	}
	if got := r.forNext(0); !slices.Equal(got, []uint64{3, 2, 1}) {
		t.Errorf("last in its stack: %v, want the whole inlining chain", got)
	}
}

// The package documentation names every sample type of the ledger's
// profile, and its default.
func TestDocListsSampleTypes(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(strings.Fields(strings.ReplaceAll(string(doc), "//", "")), " ")
	for _, typ := range ledgerTypes {
		if !strings.Contains(text, typ+"/count") {
			t.Errorf("doc.go does not list the sample type %s/count", typ)
		}
	}
	if !strings.Contains(text, SampleLeaked+"/count (the default)") {
		t.Errorf("doc.go does not name %s the default", SampleLeaked)
	}
}
