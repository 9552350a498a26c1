package browsertest

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	cdpruntime "github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gcprobe/probe"
	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/internal/testkit"
)

// leakCycles is within how many GC cycles, from the page's first look,
// the planted leak must be the page's first row: the growth model needs
// SuspectCycles+GrowthWindow cycles, and the page refreshes every 2 s.
const leakCycles = 60

type leakObj struct{ _ [64]byte }

var (
	leakMu sync.Mutex
	leaked []*leakObj
)

// plant leaks n objects with a finalizer at one known line.
func plant(w *finalizerwatch.Watcher, n int) {
	leakMu.Lock()
	defer leakMu.Unlock()
	for range n {
		o := &leakObj{}
		w.SetFinalizer(o, func(*leakObj) {}) // marker: page-leak
		leaked = append(leaked, o)
	}
}

// churn registers n cleanups whose objects it drops: a site that is not a
// leak, below the leak on the page.
func churn(w *finalizerwatch.Watcher, n int) {
	for range n {
		finalizerwatch.AddCleanupTo(w, &leakObj{}, func(int) {}, 0)
	}
}

// chromium returns the Chromium to drive, or skips the test.
func chromium(t *testing.T) string {
	if p := os.Getenv("GCPROBE_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no Chromium in CI: scripts/testenv.sh should have installed Debian's chromium and exported GCPROBE_CHROMIUM")
	}
	t.Skip("no headless Chromium on this machine (GCPROBE_CHROMIUM unset, no chromium on PATH): source scripts/testenv.sh, which installs Debian's chromium package, to run the live page's browser test")
	return ""
}

// artifactDir is where the screenshot goes: $GCPROBE_ARTIFACTS, else a new
// temporary folder that outlives the test.
func artifactDir(t *testing.T) string {
	dir := os.Getenv("GCPROBE_ARTIFACTS")
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "gcprobe-artifacts-"); err != nil {
			t.Fatal(err)
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestLivePageInChromium opens the live page of a probe whose program
// leaks at one line, in headless Chromium, as a person would: the leaking
// line becomes the first row, growing, within leakCycles GC cycles; every
// chart has one point per GC cycle; a click on the row shows the site's
// registration stack with file:line; the page asks nothing of any address
// but the probe's own paths. A screenshot is written as an artifact.
func TestLivePageInChromium(t *testing.T) {
	exe := chromium(t)
	line := testkit.MarkerLine(t, "page_test.go", "page-leak")
	w, err := finalizerwatch.New()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	p, err := probe.Start(probe.WithRegisterer(prometheus.NewRegistry()), probe.WithWatcher(w),
		probe.WithListenAddr("127.0.0.1:0"), probe.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	base := "http://" + p.Addr().String()
	defer func() { leakMu.Lock(); leaked = nil; leakMu.Unlock() }()

	// The program: it leaks a little and churns a lot, every 20 ms, with a
	// GC cycle each time, until the test ends.
	stop := make(chan struct{})
	var prog sync.WaitGroup
	prog.Go(func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			plant(w, 5)
			churn(w, 50)
			runtime.GC()
		}
	})
	defer prog.Wait()
	defer close(stop)

	// The browser, in a profile folder of the test's own.
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1400), chromedp.DisableGPU)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses to run as root otherwise
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	defer chromedp.Cancel(ctx) // closes the browser and waits for it

	// Every request the page makes, and every exception its script throws.
	var reqMu sync.Mutex
	var requests, exceptions []string
	if err := chromedp.Listen(ctx, func(ev any) {
		reqMu.Lock()
		defer reqMu.Unlock()
		switch e := ev.(type) {
		case *network.EventRequestWillBeSent:
			requests = append(requests, e.Request.URL)
		case *cdpruntime.EventExceptionThrown:
			x := e.ExceptionDetails
			msg := fmt.Sprintf("%s at %s:%d", x.Text, x.URL, x.LineNumber+1)
			if x.Exception != nil {
				msg += ": " + x.Exception.Description
			}
			exceptions = append(exceptions, msg)
		}
	}); err != nil {
		t.Fatalf("starting Chromium (%s): %v", exe, err)
	}
	start := cycles(t, base)
	step, stepCancel := context.WithTimeout(ctx, 30*time.Second)
	err = chromedp.Do(step, chromedp.Navigate(base+probe.PagePath))
	stepCancel()
	if err != nil {
		t.Fatalf("opening the page: %v", err)
	}

	// The first row: the planted line, growing.
	wantSite := fmt.Sprintf("page_test.go:%d", line)
	var row struct {
		Site, Class string
		Rows        int
	}
	testkit.Poll(t, 90*time.Second, "the planted line as the page's first row, growing", func() bool {
		row = evaluate[struct {
			Site, Class string
			Rows        int
		}](t, ctx, `(function(){
			var r = document.querySelectorAll("#sites tbody tr[data-site]");
			if (!r.length) return {Site: "", Class: "", Rows: 0};
			return {Site: r[0].getAttribute("data-site"), Class: r[0].cells[2].textContent, Rows: r.length};
		})()`)
		return strings.HasSuffix(row.Site, wantSite) && row.Class == "growing"
	})
	if n := cycles(t, base) - start; n > leakCycles {
		t.Errorf("the leak became the first row after %d GC cycles, more than %d", n, leakCycles)
	}
	if !strings.Contains(row.Site, "browsertest.plant ") {
		t.Errorf("first row %q is not browsertest.plant", row.Site)
	}

	// The charts: one point per GC cycle, in order, none twice; the pause
	// chart without a gap.
	charts := evaluate[[]struct {
		Name    string
		Points  int
		Cycles  string
		Circles []int
	}](t, ctx, `Array.prototype.map.call(document.querySelectorAll("svg.chart"), function (s) {
		var per = [0, 1].map(function (i) { return s.querySelectorAll("circle.p" + i).length; }).filter(function (n) { return n > 0; });
		return {Name: s.getAttribute("data-chart"), Points: +s.getAttribute("data-points"), Cycles: s.getAttribute("data-cycles"), Circles: per};
	})`)
	if len(charts) != 6 {
		t.Fatalf("%d charts, want 6: %+v", len(charts), charts)
	}
	for _, c := range charts {
		var cyc []uint64
		for _, f := range strings.Split(c.Cycles, ",") {
			var n uint64
			if _, err := fmt.Sscan(f, &n); err != nil {
				t.Fatalf("chart %s: cycles %q", c.Name, c.Cycles)
			}
			cyc = append(cyc, n)
		}
		if c.Points < 3 || len(cyc) != c.Points {
			t.Errorf("chart %s: %d points for cycles %q", c.Name, c.Points, c.Cycles)
		}
		for i := 1; i < len(cyc); i++ {
			if cyc[i] <= cyc[i-1] || (c.Name == "pause" && cyc[i] != cyc[i-1]+1) {
				t.Errorf("chart %s: cycle %d after %d: not one point per GC cycle", c.Name, cyc[i], cyc[i-1])
			}
		}
		for _, n := range c.Circles {
			if n != c.Points {
				t.Errorf("chart %s: a series draws %d points for %d cycles", c.Name, n, c.Points)
			}
		}
	}

	// A click on the first row shows its stack, from the planted line.
	step, stepCancel = context.WithTimeout(ctx, 20*time.Second)
	err = chromedp.Do(step,
		chromedp.Click(chromedp.CSS(`#sites tbody tr[data-site]`)),
		chromedp.WaitVisible(chromedp.CSS(`#stack`)))
	stepCancel()
	if err != nil {
		t.Fatalf("clicking the first row: %v", err)
	}
	frames := evaluate[[]string](t, ctx, `Array.prototype.map.call(document.querySelectorAll("#stack-frames li"), function (li) { return li.textContent; })`)
	if len(frames) < 2 || !strings.Contains(frames[0], "browsertest.plant ") || !strings.HasSuffix(frames[0], wantSite) {
		t.Errorf("stack shown on click: %q, want it to begin at browsertest.plant …%s", frames, wantSite)
	}

	// The screenshot, an artifact for a person, not an assertion.
	step, stepCancel = context.WithTimeout(ctx, 20*time.Second)
	png, err := chromedp.Run(step, chromedp.FullScreenshot(100))
	stepCancel()
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	shot := filepath.Join(artifactDir(t), "gcprobe-live-page.png")
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot of the live page: %s", shot)
	fmt.Fprintf(os.Stderr, "browsertest: screenshot of the live page: %s\n", shot)

	// The page rendered the latest document without an error.
	if ok := evaluate[bool](t, ctx, `document.getElementById("error").hidden && !!document.body.getAttribute("data-updated") &&
		document.querySelectorAll("#gc-cause li").length > 0`); !ok {
		t.Errorf("the page shows an error or never rendered: %s", evaluate[string](t, ctx, `document.getElementById("error").textContent`))
	}

	// Nothing but the probe's own paths, and no script error.
	reqMu.Lock()
	defer reqMu.Unlock()
	for _, e := range exceptions {
		t.Errorf("the page's script threw: %s", e)
	}
	if len(requests) < 4 {
		t.Errorf("only %d requests seen: %q", len(requests), requests)
	}
	for _, r := range requests {
		u, err := url.Parse(r)
		if err != nil || u.Scheme != "http" || u.Host != p.Addr().String() || !strings.HasPrefix(u.Path, probe.PagePath) {
			t.Errorf("the page requested %q, outside the probe's page", r)
		}
	}
}

// evaluate runs a JavaScript expression in the page and decodes its value.
func evaluate[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	step, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(step, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluating in the page: %v", err)
	}
	return v
}

// cycles returns the GC cycles the probe has seen, from its page's JSON.
func cycles(t *testing.T, base string) uint64 {
	t.Helper()
	resp, err := http.Get(base + probe.PagePath + probe.PageDataPath)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var d probe.PageData
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil {
		t.Fatal(err)
	}
	return d.GC.Cycles
}
