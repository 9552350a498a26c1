package probe_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gcprobe/probe"
	"github.com/gcprobe/probe/heapprofile"
	"github.com/gcprobe/probe/internal/testkit"
	"github.com/gcprobe/probe/memstats"
)

// The planted programs run each in a child process of their own, so that
// one's heap is not another's and the parent's tests leave no trace in
// them: the child runs TestGCCauseChild with the scenario in this
// variable.
const gcCauseChildEnv = "GCPROBE_GCCAUSE_CHILD"

// causeRateWindow is the planted programs' rate window: short, so that
// "within three windows" is seconds.
const causeRateWindow = 3 * time.Second

var (
	causeSink  []byte
	causeCache [][]byte
)

// allocLoop allocates 16 KiB objects at one line, keeping none, until
// stop: a DeepCopy storm.
func allocLoop(stop <-chan struct{}) {
	for i := 0; ; i++ {
		if i%256 == 0 {
			select {
			case <-stop:
				return
			default:
			}
		}
		causeSink = make([]byte, 16<<10) // marker: alloc-loop
	}
}

// cacheGrow keeps 256 KiB more every 25 ms at one line (10 MiB/s), and
// churns 256 KiB at another, so that GC cycles keep coming, until stop.
func cacheGrow(stop <-chan struct{}) {
	t := time.NewTicker(25 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		if len(causeCache) < 1024 { // at most 256 MiB
			causeCache = append(causeCache, make([]byte, 256<<10)) // marker: cache-grow
		}
		for range 16 {
			causeSink = make([]byte, 64<<10)
		}
	}
}

// steady holds a 4 MiB working set, replacing a piece of it every 10 ms,
// and allocates 1.6 MB/s: a healthy program.
func steady(stop <-chan struct{}) {
	held := make([][]byte, 64)
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		held[i%len(held)] = make([]byte, 16<<10)
	}
}

// TestGCCauseChild is a planted program; it runs only in a child process
// (see runCause). It starts a probe, runs the scenario's workload and
// prints the probe's report once its condition holds, or fails.
func TestGCCauseChild(t *testing.T) {
	scenario := os.Getenv(gcCauseChildEnv)
	if scenario == "" {
		t.Skip("a planted program, run by the TestGCCause tests in a child process")
	}
	if scenario == "busy" {
		spin() // the CPU-bound neighbour of "starved"
		return
	}
	if scenario == "alloc-off" {
		runtime.MemProfileRate = 0 // as a program that turns the heap profile off, early in main
	}
	sopts := []memstats.Option{memstats.WithRateWindow(causeRateWindow), memstats.WithInterval(250 * time.Millisecond),
		// Scaled to the short window: a cause holds a second before it
		// fires, and holds a window once fired.
		memstats.WithCauseHysteresis(time.Second, causeRateWindow)}
	if scenario == "starved" {
		// A lower bar for stopping, so that the starved host shows
		// within the test's time.
		sopts = append(sopts, memstats.WithStoppingLatency(0.3, 200*time.Microsecond))
	}
	p, err := probe.Start(probe.WithRegisterer(prometheus.NewRegistry()),
		probe.WithSamplerOptions(sopts...),
		probe.WithHeapProfileOptions(heapprofile.WithInterval(250*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(stop)
	work := map[string]func(<-chan struct{}){
		"alloc": allocLoop, "cache": cacheGrow, "memlimit": cacheGrow, "healthy": steady, "starved": allocLoop, "alloc-off": allocLoop,
	}[scenario]
	if scenario == "starved" {
		startNeighbour(t)
	}
	wg.Go(func() { work(stop) })

	start := time.Now()
	if scenario == "healthy" {
		// Three windows, every report without a cause or a blamed line.
		var waits waitLog
		for time.Since(start) < 3*causeRateWindow {
			waits.note()
			r := p.Report()
			for _, c := range r.GCCause.Causes {
				if c.Event.Detector == "stopping_latency" && (hostSaturated() || waits.contended(causeRateWindow)) {
					// Stopping the world waits for every thread to be
					// scheduled: on a host whose cores are all busy
					// (CI runs this under a CPU-bound load, and beside
					// other packages' tests) that takes milliseconds
					// for any program. The host's cause, not the
					// program's; on a host with a core to spare, where
					// the threads do not wait for one, it fails the
					// test like any other.
					continue
				}
				t.Fatalf("a healthy program has a cause:\n%s", r)
			}
			time.Sleep(100 * time.Millisecond) // pacing: the condition is checked for the whole span
		}
		fmt.Printf("REPORT\n%s", p.Report())
		return
	}
	want := map[string]string{
		"alloc":     memstats.DetectorAllocationDriven,
		"cache":     memstats.DetectorLiveHeapGrowth,
		"memlimit":  memstats.DetectorMemoryLimitPressure,
		"starved":   memstats.DetectorStoppingLatency,
		"alloc-off": memstats.DetectorAllocationDriven,
	}[scenario]
	// A loaded machine is slow: the child waits 20 windows from its start,
	// and the parent judges the time. A Report every 50ms, not every
	// millisecond, keeps the polling out of the allocation and GC load the
	// planted program is judged on; for the same reason the last report is
	// formatted only if the test fails, not at every check.
	var r probe.Report
	defer func() {
		if t.Failed() {
			t.Logf("the last report, after %v:\n%s", time.Since(start), r)
		}
	}()
	testkit.PollEvery(t, time.Until(start.Add(20*causeRateWindow)), 50*time.Millisecond, "a "+want+" cause with a site", func() (bool, string) {
		r = p.Report()
		return slices.ContainsFunc(r.GCCause.Causes, func(c probe.Cause) bool {
			// A note ("no line stands out in the heap profile's latest
			// window") is the answer only where the parent wants one (the
			// profile off); elsewhere the parent looks for the line, which
			// the heap profile names a window or two after the cause fires.
			return c.Event.Detector == want && (len(c.Sites) > 0 || want == memstats.DetectorStoppingLatency || (scenario == "alloc-off" && c.Note != ""))
		}), ""
	})
	printAllocsTop(t, p)
	if missing := pageLinesNotInReport(t, p); len(missing) > 0 {
		fmt.Printf("PAGE-ONLY %q\n", missing)
	}
	fmt.Printf("NAMES %s\n", strings.Join(p.GCCauseNames(), ","))
	fmt.Printf("AFTER %v\nREPORT\n%s", time.Since(start).Round(time.Millisecond), r)
}

// spin keeps four threads a CPU busy for a minute at most: a CPU-bound
// neighbour. The parent kills it sooner.
func spin() {
	deadline := time.Now().Add(time.Minute)
	var wg sync.WaitGroup
	for range 4 * runtime.NumCPU() {
		wg.Go(func() {
			for n := 0; time.Now().Before(deadline); n++ {
				for i := range 1 << 16 {
					n ^= i
				}
			}
		})
	}
	wg.Wait()
}

// startNeighbour starts a CPU-bound process beside this one (the test
// binary again, as "busy"), killed when the test ends.
func startNeighbour(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^TestGCCauseChild$")
	cmd.Env = append(os.Environ(), gcCauseChildEnv+"=busy")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
}

// pageLinesNotInReport returns the lines the live page names (the causes'
// sites, the allocating and the growing lines) that the Report, taken at
// the same heap profile read, does not.
func pageLinesNotInReport(t *testing.T, p *probe.Probe) []string {
	for range 20 {
		before := p.HeapProfile().Snapshot().Reads
		rep := p.Report().String()
		rec := httptest.NewRecorder()
		p.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, probe.PagePath+probe.PageDataPath, nil))
		if p.HeapProfile().Snapshot().Reads != before {
			continue // a read came between the two: try again
		}
		var d probe.PageData
		if err := json.Unmarshal(rec.Body.Bytes(), &d); err != nil {
			t.Fatalf("page data: %v: %s", err, rec.Body)
		}
		var sites []probe.PageHeapSite
		for _, c := range d.GCCause.Causes {
			sites = append(sites, c.Sites...)
		}
		sites = append(append(sites, d.AllocatingSites.Allocating...), d.AllocatingSites.Growing...)
		var missing []string
		for _, s := range sites {
			// "function /path/file.go:line" on the page, "function
			// file.go:line" in the Report.
			i := strings.LastIndexByte(s.Site, ' ')
			if i < 0 || !strings.Contains(rep, s.Site[:i]+" "+filepath.Base(s.Site[i+1:])) {
				missing = append(missing, s.Site)
			}
		}
		return missing
	}
	t.Fatal("the heap profile was read between every Report and page taken")
	return nil
}

// printAllocsTop fetches the delta allocation profile from the probe's
// handler, as go tool pprof would, and prints the function of its first
// sample's site.
func printAllocsTop(t *testing.T, p *probe.Probe) {
	rec := httptest.NewRecorder()
	p.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, probe.AllocsProfilePath, nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", probe.AllocsProfilePath, rec.Code, rec.Body)
	}
	prof, err := profile.Parse(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	if err := prof.CheckValid(); err != nil {
		t.Fatal(err)
	}
	if len(prof.Sample) > 0 {
		fmt.Printf("ALLOCS-TOP %s\n", prof.Sample[0].Location[0].Line[0].Function.Name)
	}
}

// runCause runs a planted program in a child process and returns its
// report and how long the cause took to show.
func runCause(t *testing.T, scenario string, env ...string) (report string, after time.Duration) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs a planted program for seconds")
	}
	code, out := testkit.RunTest(t, "TestGCCauseChild", append([]string{gcCauseChildEnv + "=" + scenario}, env...), "-test.v")
	if code != 0 {
		t.Fatalf("planted program %s failed (exit %d):\n%s", scenario, code, out)
	}
	rep, ok := out, strings.Contains(out, "REPORT\n")
	if !ok {
		t.Fatalf("no report from %s:\n%s", scenario, out)
	}
	if i := strings.Index(out, "AFTER "); i >= 0 {
		after, _ = time.ParseDuration(strings.Fields(out[i+len("AFTER "):])[0])
	}
	t.Logf("%s after %v:\n%s", scenario, after, rep)
	return rep, after
}

// lookAt is the line WriteTo prints for a blamed site at the marked line.
func lookAt(t *testing.T, marker string) string {
	return fmt.Sprintf("%s:%d:", filepath.Base("gccause_test.go"), testkit.MarkerLine(t, "gccause_test.go", marker))
}

// withinWindows fails t if the cause took more than three windows; the
// rate-based detectors need a quarter window, the live heap four cycles
// and the heap profile three windows of growth.
func withinWindows(t *testing.T, after time.Duration) {
	t.Helper()
	if after > 3*causeRateWindow {
		t.Errorf("named after %v, more than three windows (%v)", after, 3*causeRateWindow)
	}
}

func TestGCCauseAllocationLoop(t *testing.T) {
	rep, after := runCause(t, "alloc")
	withinWindows(t, after)
	if !strings.Contains(rep, "GC cause: allocation-driven:") {
		t.Errorf("no allocation-driven cause in the report")
	}
	if want := "look at github.com/gcprobe/probe_test.allocLoop " + lookAt(t, "alloc-loop"); !strings.Contains(rep, want) {
		t.Errorf("the report does not name the loop's line %q", want)
	}
	if !strings.Contains(rep, "\nNAMES allocation_driven") {
		t.Errorf("GCCauseNames does not name allocation_driven first")
	}
	if strings.Contains(rep, "PAGE-ONLY") {
		t.Errorf("the page names lines the Report does not")
	}
	if !strings.Contains(rep, "ALLOCS-TOP github.com/gcprobe/probe_test.allocLoop\n") {
		t.Errorf("the delta profile at %s does not put the loop first", probe.AllocsProfilePath)
	}
}

func TestGCCauseGrowingCache(t *testing.T) {
	rep, after := runCause(t, "cache")
	withinWindows(t, after)
	if !strings.Contains(rep, "GC cause: live-heap growth:") {
		t.Errorf("no live-heap growth cause in the report")
	}
	if strings.Contains(rep, "PAGE-ONLY") {
		t.Errorf("the page names lines the Report does not")
	}
	if want := "look at github.com/gcprobe/probe_test.cacheGrow " + lookAt(t, "cache-grow"); !strings.Contains(rep, want) {
		t.Errorf("the report does not name the cache's line %q", want)
	}
}

func TestGCCauseMemoryLimit(t *testing.T) {
	// The cache grows past what a 48 MiB limit lets GOGC=100 double.
	rep, after := runCause(t, "memlimit", "GOMEMLIMIT=48MiB", "GOGC=100")
	withinWindows(t, after)
	if !strings.Contains(rep, "GC cause: memory-limit pressure:") || !strings.Contains(rep, "heap goal set by memory_limit") {
		t.Errorf("no memory-limit pressure in the report")
	}
	if want := lookAt(t, "cache-grow"); !strings.Contains(rep, want) {
		t.Errorf("the report does not name the growing line %q", want)
	}
}

func TestGCCauseNamesOfNoProbe(t *testing.T) {
	var p *probe.Probe
	if n := p.GCCauseNames(); n != nil {
		t.Errorf("a nil Probe names causes %v", n)
	}
	if n := new(probe.Probe).GCCauseNames(); n != nil {
		t.Errorf("a zero Probe names causes %v", n)
	}
}

// TestGCCauseProfileOff: with runtime.MemProfileRate = 0 the cause is
// named, and the Report says why no line is.
func TestGCCauseProfileOff(t *testing.T) {
	rep, _ := runCause(t, "alloc-off")
	if !strings.Contains(rep, "GC cause: allocation-driven:") {
		t.Errorf("no allocation-driven cause in the report")
	}
	if !strings.Contains(rep, "note: the heap profile is off (runtime.MemProfileRate = 0)") {
		t.Errorf("the report does not say the heap profile is off")
	}
	if strings.Contains(rep, "look at") {
		t.Errorf("the report names a line with the profile off")
	}
}

// TestGCCauseCPUStarved: beside a CPU-bound neighbour, stopping the world
// is slow because the threads wait for a CPU, and the words say so.
func TestGCCauseCPUStarved(t *testing.T) {
	rep, _ := runCause(t, "starved")
	if !strings.Contains(rep, "GC cause: CPU starvation:") {
		t.Errorf("stopping latency beside a CPU-bound neighbour is not put down to CPU starvation")
	}
	if strings.Contains(rep, "slow to reach a safe point") {
		t.Errorf("the report blames a goroutine of the program")
	}
}

func TestGCCauseHealthy(t *testing.T) {
	rep, _ := runCause(t, "healthy")
	if strings.Contains(rep, "look at") {
		t.Errorf("a healthy program's report blames a line")
	}
	if strings.Contains(rep, "GC cause: none") {
		return
	}
	// The child allowed stopping latency on a saturated or contended
	// host (see TestGCCauseChild), which the probe itself then puts down
	// to CPU starvation, mostly; nothing else.
	for _, l := range strings.Split(rep, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "GC cause:") && !strings.Contains(l, "GC cause: stopping latency:") &&
			!strings.Contains(l, "GC cause: CPU starvation:") {
			t.Errorf("a healthy program's report has a cause: %s", l)
		}
	}
}

// waitLog notes, over time, how long this process's threads have waited
// for a CPU: a run-queue wait of milliseconds is what makes stopping the
// world slow, and it is the host's doing. Other processes' bursts (the
// other packages' tests, run beside this one by go test ./...) show in it
// at once, where the load average lags a minute behind.
type waitLog struct {
	at   []time.Time
	wait []time.Duration
}

// note appends the time and the process's run-queue wait so far, when
// the platform tells it.
func (l *waitLog) note() {
	if w, ok := runqueueWait(); ok {
		l.at = append(l.at, time.Now())
		l.wait = append(l.wait, w)
	}
}

// contended reports whether, over the last window, the process's threads
// waited for a CPU 2 % of the time or more. Measured on a 2-core host:
// 0.4-0.9 % while nothing else ran, 3-10 % beside another package's
// tests.
func (l *waitLog) contended(window time.Duration) bool {
	n := len(l.at)
	if n < 2 {
		return false
	}
	i, _ := slices.BinarySearchFunc(l.at, l.at[n-1].Add(-window), time.Time.Compare)
	i = min(i, n-2)
	return l.wait[n-1]-l.wait[i] >= l.at[n-1].Sub(l.at[i])/50
}

// runqueueWait returns how long the process's threads have waited on a
// run queue (the second field of Linux's /proc/self/task/*/schedstat,
// nanoseconds; threads that exited are left out), or false where that is
// not known.
func runqueueWait() (time.Duration, bool) {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return 0, false
	}
	var sum time.Duration
	for _, t := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + t.Name() + "/schedstat")
		if err != nil {
			continue // the thread exited
		}
		var run, wait int64
		if _, err := fmt.Sscan(string(b), &run, &wait); err != nil {
			return 0, false
		}
		sum += time.Duration(wait)
	}
	return sum, true
}

// hostSaturated reports whether the host's run queue holds at least a
// runnable thread per CPU (Linux's 1-minute load average), the state in
// which stopping the world is slow for any program.
func hostSaturated() bool {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return false
	}
	var load float64
	if _, err := fmt.Sscan(string(b), &load); err != nil {
		return false
	}
	return load >= float64(runtime.NumCPU())
}
