package probe_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gcprobe/probe"
	"github.com/gcprobe/probe/heapprofile"
	"github.com/gcprobe/probe/internal/testkit"
)

// The time-judged causes run with the probe's defaults (a one-minute rate
// window, the default hysteresis), each in a child process of its own, for
// a minute or more: what a user running the probe sees.
const gcTimeChildEnv = "GCPROBE_GCTIME_CHILD"

// blob is a 12 KiB struct, copied whole.
type blob struct{ b [12 << 10]byte }

var (
	blobSrc  blob
	blobSink *blob
	growMap  = map[int][]byte{}
)

// copyLoop copies a 12 KiB struct to the heap at one line, as fast as it
// can, until stop.
func copyLoop(stop <-chan struct{}) {
	for i := 0; ; i++ {
		if i%64 == 0 {
			select {
			case <-stop:
				return
			default:
			}
		}
		b := blobSrc // marker: copy-line
		blobSink = &b
	}
}

// mapGrow keeps 8 KiB more every 5 ms (1.6 MB/s) in a map at one line,
// until stop: steady growth.
func mapGrow(stop <-chan struct{}) {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		growMap[i] = make([]byte, 8<<10) // marker: map-grow
	}
}

// flatHeld is what flatUnderLimit holds: a package variable, so that the
// compiler cannot see it is never read and let the GC free it.
var flatHeld [][]byte

// flatUnderLimit holds 32 MiB, replacing pieces of it, and churns fast:
// a constant live heap under GOMEMLIMIT.
func flatUnderLimit(stop <-chan struct{}) {
	flatHeld = make([][]byte, 512)
	held := flatHeld
	for i := range held {
		held[i] = make([]byte, 64<<10)
	}
	for i := 0; ; i++ {
		if i%64 == 0 {
			select {
			case <-stop:
				return
			default:
			}
		}
		held[i%len(held)] = make([]byte, 64<<10)
	}
}

// lineCounter counts the detector lines the probe logs, by detector
// and reason, and keeps them.
type lineCounter struct {
	mu    sync.Mutex
	lines []string
	n     atomic.Int64
}

func (h *lineCounter) Enabled(context.Context, slog.Level) bool { return true }
func (h *lineCounter) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *lineCounter) WithGroup(string) slog.Handler            { return h }
func (h *lineCounter) Handle(_ context.Context, r slog.Record) error {
	var det string
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "detector" {
			det = a.Value.String()
		}
		return true
	})
	line := fmt.Sprintf("%s %s %s", r.Time.Format("15:04:05"), r.Message, det)
	h.mu.Lock()
	h.lines = append(h.lines, line)
	h.mu.Unlock()
	h.n.Add(1)
	return nil
}

func (h *lineCounter) all() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.lines...)
}

// TestGCTimeChild is a planted program run by the tests below in a child
// process: it runs a workload with the probe's defaults for the
// scenario's time, and prints the report, the detector lines logged, and
// when the wanted cause was first named with its line.
func TestGCTimeChild(t *testing.T) {
	scenario := os.Getenv(gcTimeChildEnv)
	if scenario == "" {
		t.Skip("a planted program, run by the TestGCTime tests in a child process")
	}
	h := &lineCounter{}
	p, err := probe.Start(probe.WithRegisterer(prometheus.NewRegistry()), probe.WithLogger(slog.New(h)),
		probe.WithHeapProfileOptions(heapprofile.WithInterval(5*time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(stop)
	var run time.Duration
	switch scenario {
	case "growcopy":
		wg.Go(func() { copyLoop(stop) })
		wg.Go(func() { mapGrow(stop) })
		run = 90 * time.Second
	case "flatlimit":
		wg.Go(func() { flatUnderLimit(stop) })
		run = 70 * time.Second
	}
	start := time.Now()
	named := time.Duration(0)
	var namedReport string
	for time.Since(start) < run {
		if named == 0 && scenario == "growcopy" {
			r := p.Report()
			for _, c := range r.GCCause.Causes {
				if c.Event.Detector == "live_heap_growth" && len(c.Sites) > 0 {
					named, namedReport = time.Since(start), r.String()
				}
			}
		}
		time.Sleep(250 * time.Millisecond) // pacing: the run lasts its time whatever happens
	}
	fmt.Printf("NAMED %v\n", named)
	if namedReport != "" {
		fmt.Printf("NAMED-REPORT\n%sEND-NAMED\n", namedReport)
	}
	for _, l := range h.all() {
		fmt.Printf("LOGGED %s\n", l)
	}
	fmt.Printf("REPORT\n%s", p.Report())
}

// runTimeChild runs a TestGCTimeChild scenario and returns its output.
func runTimeChild(t *testing.T, scenario string, env ...string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("runs a planted program for a minute or more")
	}
	code, out := testkit.RunTest(t, "TestGCTimeChild", append([]string{gcTimeChildEnv + "=" + scenario}, env...), "-test.v", "-test.timeout=5m")
	if code != 0 {
		t.Fatalf("planted program %s failed (exit %d):\n%s", scenario, code, out)
	}
	t.Logf("%s:\n%s", scenario, out)
	return out
}

// loggedLines returns the child's detector lines for a detector ("" for
// all).
func loggedLines(out, detector string) []string {
	var ls []string
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		if rest, ok := strings.CutPrefix(l, "LOGGED "); ok && (detector == "" || strings.HasSuffix(rest, " "+detector)) {
			ls = append(ls, rest)
		}
	}
	return ls
}

// runtimeLine matches a printed runtime frame: "runtime.x file.go:N".
var runtimeLine = regexp.MustCompile(`(^|\s)(runtime|internal/runtime/[a-z]+)\.[A-Za-z(*]`)

// TestGCTimeSteadyGrowthAndCopies: a map that grows steadily at one line
// and a 12 KiB struct copied at another. The Report names the growth, at
// the map's line, within 60 s; the copy line is among the allocating
// lines; no runtime frame is printed; live_heap_growth changes state at
// most 4 times in 90 s.
func TestGCTimeSteadyGrowthAndCopies(t *testing.T) {
	t.Parallel()
	out := runTimeChild(t, "growcopy")
	var named time.Duration
	if i := strings.Index(out, "NAMED "); i >= 0 {
		named, _ = time.ParseDuration(strings.Fields(out[i+len("NAMED "):])[0])
	}
	if named == 0 || named > 60*time.Second {
		t.Errorf("the growth was named with a line after %v, want within 60 s", named)
	}
	rep := out[strings.Index(out, "NAMED-REPORT\n")+1:]
	if i := strings.Index(rep, "END-NAMED"); i >= 0 {
		rep = rep[:i]
	}
	if want := "look at github.com/gcprobe/probe_test.mapGrow " + fmt.Sprintf("gccause_time_test.go:%d:", testkit.MarkerLine(t, "gccause_time_test.go", "map-grow")); !strings.Contains(rep, want) {
		t.Errorf("the report does not name the map's line %q", want)
	}
	final := out[strings.LastIndex(out, "REPORT\n"):]
	for _, r := range []string{rep, final} {
		alloc := r[strings.Index(r, "allocating lines over")+1:]
		if want := fmt.Sprintf("copyLoop gccause_time_test.go:%d", testkit.MarkerLine(t, "gccause_time_test.go", "copy-line")); !strings.Contains(alloc, want) {
			t.Errorf("the copy line %q is not among the allocating lines:\n%s", want, alloc)
		}
		gc := r[strings.Index(r, "GC work over"):]
		if m := runtimeLine.FindString(gc); m != "" {
			t.Errorf("a runtime frame is printed (%q) in:\n%s", m, gc)
		}
	}
	if ls := loggedLines(out, "live_heap_growth"); len(ls) > 4 {
		t.Errorf("live_heap_growth changed state %d times in 90 s, want at most 4: %q", len(ls), ls)
	}
}

// TestGCTimeConstantHeapUnderLimit: a constant live heap under GOMEMLIMIT
// logs at most 2 detector lines a minute (memory-limit pressure, named
// once, and nothing flapping). Lines put down to CPU starvation are the
// host's, left out: CI runs this beside other packages' tests.
func TestGCTimeConstantHeapUnderLimit(t *testing.T) {
	t.Parallel()
	out := runTimeChild(t, "flatlimit", "GOMEMLIMIT=40MiB", "GOGC=100")
	var ls []string
	for _, l := range loggedLines(out, "") {
		if !strings.HasSuffix(l, " stopping_latency") {
			ls = append(ls, l)
		}
	}
	// 70 s: at most 2 lines a minute, so 3 over the run.
	if len(ls) > 3 {
		t.Errorf("%d detector lines in 70 s under the memory limit, want at most 3: %q", len(ls), ls)
	}
}
