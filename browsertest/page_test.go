package browsertest

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
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
// chart has a point per history row, the pause chart per GC cycle; a click on the row shows the site's
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
	p, err := probe.Start(probe.WithRegisterer(prometheus.NewRegistry()), probe.WithWatcher(w), probe.WithSuspectAge(0), // judged in GC cycles: the test forces them
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

	ctx, pe := openBrowser(t, exe)
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

	// The charts: a point per history row (a GC cycle, at least
	// probe.PageHistoryStep after the row before), in order, none twice;
	// the pause chart one per GC cycle, without a gap. Three points in
	// each first.
	testkit.AwaitGC(t, 30*time.Second, "three points in every chart", func() bool {
		return evaluate[int](t, ctx, `Math.min.apply(null, Array.prototype.map.call(document.querySelectorAll("svg.chart"), function (s) { return +s.getAttribute("data-points"); }))`) >= 3
	})
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

	screenshot(t, ctx, "gcprobe-live-page.png")

	// The page rendered the latest document without an error.
	if ok := evaluate[bool](t, ctx, `document.getElementById("error").hidden && !!document.body.getAttribute("data-updated") &&
		document.querySelectorAll("#gc-cause li").length > 0`); !ok {
		t.Errorf("the page shows an error or never rendered: %s", evaluate[string](t, ctx, `document.getElementById("error").textContent`))
	}

	// Nothing but the probe's own paths, and no script error.
	pe.check(t, p.Addr().String())
}

// pageEvents are every request the page makes, and every exception its
// script throws.
type pageEvents struct {
	mu                   sync.Mutex
	requests, exceptions []string
}

// openBrowser starts Chromium exe in a profile folder of the test's own
// and listens to the page's requests and exceptions. The browser closes
// when the test ends.
func openBrowser(t *testing.T, exe string) (context.Context, *pageEvents) {
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1400), chromedp.DisableGPU)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses to run as root otherwise
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	t.Cleanup(func() { chromedp.Cancel(ctx) }) // closes the browser and waits for it (cleanups run last first)
	pe := &pageEvents{}
	if err := chromedp.Listen(ctx, func(ev any) {
		pe.mu.Lock()
		defer pe.mu.Unlock()
		switch e := ev.(type) {
		case *network.EventRequestWillBeSent:
			pe.requests = append(pe.requests, e.Request.URL)
		case *cdpruntime.EventExceptionThrown:
			x := e.ExceptionDetails
			msg := fmt.Sprintf("%s at %s:%d", x.Text, x.URL, x.LineNumber+1)
			if x.Exception != nil {
				msg += ": " + x.Exception.Description
			}
			pe.exceptions = append(pe.exceptions, msg)
		}
	}); err != nil {
		t.Fatalf("starting Chromium (%s): %v", exe, err)
	}
	return ctx, pe
}

// check reports any exception the page's script threw, and any request
// outside the page's own paths on host.
func (pe *pageEvents) check(t *testing.T, host string) {
	t.Helper()
	pe.mu.Lock()
	defer pe.mu.Unlock()
	for _, e := range pe.exceptions {
		t.Errorf("the page's script threw: %s", e)
	}
	if len(pe.requests) < 4 {
		t.Errorf("only %d requests seen: %q", len(pe.requests), pe.requests)
	}
	for _, r := range pe.requests {
		u, err := url.Parse(r)
		if err != nil || u.Scheme != "http" || u.Host != host || !strings.HasPrefix(u.Path, probe.PagePath) {
			t.Errorf("the page requested %q, outside the probe's page", r)
		}
	}
}

// screenshot writes the page as name in the artifact folder and logs
// its path: an artifact for a person, not an assertion.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	step, stepCancel := context.WithTimeout(ctx, 20*time.Second)
	png, err := chromedp.Run(step, chromedp.FullScreenshot(100))
	stepCancel()
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	shot := filepath.Join(artifactDir(t), name)
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot of the live page: %s", shot)
	fmt.Fprintf(os.Stderr, "browsertest: screenshot of the live page: %s\n", shot)
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

// droppedSite is the document's dropped site in TestLivePageShowsDroppedLeak:
// files opened at a line deep in a module and never closed, under a
// function whose name is longer than the site column.
var droppedSite = probe.PageSite{
	Kind:     "finalizer",
	Function: "example.com/someverylongmodulename/internal/fileserver.(*StaticFileServerWithCaching).serveStaticFileWithCachingHeadersAndCompression",
	File:     "/home/build/go/pkg/mod/example.com/someverylongmodulename@v1.2.3/internal/fileserver/staticfiles.go",
	Line:     613,
	Resource: "os.File",
	Class:    "churn",
	Verdict:  "dropped",
	Words:    "286990 files dropped without Close, each held open until the GC found it: close them where they are opened, on every path (defer f.Close())",

	Registered: 287000, Executed: 286990, Outstanding: 10, Dropped: 286990,
	Suspects: []*uint64{}, Stack: []probe.PageFrame{},
}

// TestLivePageShowsDroppedLeak opens the live page on a document that
// has, besides the probe's own, a site that dropped files without Close
// (a document such as the runtime build mode makes; the root package's
// tests check that the probe writes one so, pageSite and the Report's
// words): the row says dropped, styled as a leak, with the sentence
// under it and its file:line shortened from the left, whole and visible,
// never cut at the right, the full path in its title; the registered
// column reads 287000; the header says the runtime build mode is on.
func TestLivePageShowsDroppedLeak(t *testing.T) {
	exe := chromium(t)
	w, err := finalizerwatch.New()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	p, err := probe.Start(probe.WithRegisterer(prometheus.NewRegistry()), probe.WithWatcher(w),
		probe.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	plant(w, 3) // a site of the probe's own, growing or not, beside the dropped one
	defer func() { leakMu.Lock(); leaked = nil; leakMu.Unlock() }()
	droppedSite.Site = droppedSite.Function + " " + droppedSite.File + ":613"

	// The probe's page, with the dropped site added to each of its
	// documents, as the last site (dropped files rank as churn).
	page := p.PageHandler()
	mux := http.NewServeMux()
	mux.Handle(probe.PagePath, page)
	mux.HandleFunc(probe.PagePath+probe.PageDataPath, func(rw http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		page.ServeHTTP(rec, r)
		var d probe.PageData
		if err := json.Unmarshal(rec.Body.Bytes(), &d); err != nil {
			http.Error(rw, "the probe's document: "+err.Error(), http.StatusInternalServerError)
			return
		}
		d.RuntimeMode = true
		ds := droppedSite
		ds.Counts = nil
		for _, c := range d.Counters {
			ds.Counts = append(ds.Counts, map[string]uint64{"registered": ds.Registered, "executed": ds.Executed,
				"outstanding": ds.Outstanding, "dropped": ds.Dropped}[c.Name])
		}
		d.Sites = append(d.Sites, ds)
		tot := d.Totals["finalizer"]
		tot.Registered += droppedSite.Registered
		tot.Dropped += droppedSite.Dropped
		d.Totals["finalizer"] = tot
		rw.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(rw).Encode(&d)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	ctx, pe := openBrowser(t, exe)
	step, stepCancel := context.WithTimeout(ctx, 30*time.Second)
	err = chromedp.Do(step, chromedp.Navigate(srv.URL+probe.PagePath))
	stepCancel()
	if err != nil {
		t.Fatalf("opening the page: %v", err)
	}
	// What a person sees of the dropped site, as the page drew it.
	type seen struct {
		Rows                          int
		Verdict, VerdictClass, Bg     string
		GrowingColor                  string
		Registered                    string
		Loc, LocTitle                 string
		LocScroll, LocClient          int
		LocRight, CellRight           float64
		CellScroll, CellClient        int
		Why, WhyLoc, WhyTitle         string
		WhyLocScroll, WhyLocClient    int
		WhyLocRight, WhyCellRight     float64
		Mode, ModeClass, Summary      string
		ViewWidth                     float64
		FnScroll, FnClient, FnVisible int
		Heads                         []string
	}
	var got seen
	testkit.Poll(t, 30*time.Second, "the dropped site's row and its sentence", func() bool {
		got = evaluate[seen](t, ctx, `(function(){
			var out = {Rows: 0};
			var rows = document.querySelectorAll("#sites tbody tr[data-site]"), tr = null;
			out.Rows = rows.length;
			rows.forEach(function (r) { if (r.getAttribute("data-site").indexOf("staticfiles.go:613") >= 0) tr = r; });
			if (!tr) return out;
			var heads = Array.prototype.map.call(document.querySelectorAll("#sites thead th"), function (th) { return th.textContent; });
			var v = tr.cells[heads.indexOf("class")], cell = tr.cells[0], loc = cell.querySelector(".loc"), fn = cell.querySelector(".fn");
			out.Verdict = v.textContent; out.VerdictClass = v.className; out.Bg = getComputedStyle(v).backgroundColor;
			var g = document.createElement("td"); g.className = "verdict growing"; tr.appendChild(g);
			out.GrowingColor = getComputedStyle(g).color; tr.removeChild(g);
			out.Registered = tr.cells[heads.indexOf("registered")].textContent;
			out.Heads = heads;
			out.Loc = loc.textContent; out.LocTitle = loc.title;
			out.LocScroll = loc.scrollWidth; out.LocClient = loc.clientWidth;
			out.LocRight = loc.getBoundingClientRect().right; out.CellRight = cell.getBoundingClientRect().right;
			out.CellScroll = cell.scrollWidth; out.CellClient = cell.clientWidth;
			out.FnScroll = fn.scrollWidth; out.FnClient = fn.clientWidth; out.FnVisible = fn.clientWidth > 0 ? 1 : 0;
			var why = tr.nextElementSibling;
			if (why && why.getAttribute("data-why") === tr.getAttribute("data-site")) {
				var wl = why.querySelector(".loc");
				out.Why = why.textContent; out.WhyLoc = wl.textContent; out.WhyTitle = wl.title;
				out.WhyLocScroll = wl.scrollWidth; out.WhyLocClient = wl.clientWidth;
				out.WhyLocRight = wl.getBoundingClientRect().right; out.WhyCellRight = why.cells[0].getBoundingClientRect().right;
			}
			out.ViewWidth = document.documentElement.clientWidth;
			var m = document.getElementById("mode");
			out.Mode = m.textContent; out.ModeClass = m.className; out.Summary = document.getElementById("summary").textContent;
			return out;
		})()`)
		return got.Verdict != "" && got.Why != ""
	})
	t.Logf("the dropped site as drawn: %+v", got)

	// Styled as a leak: the badge says dropped, white on the red that
	// growing is written in.
	if got.Verdict != "dropped" || !strings.Contains(got.VerdictClass, "dropped") {
		t.Errorf("class cell %q (class %q), want dropped", got.Verdict, got.VerdictClass)
	}
	if got.Bg != got.GrowingColor || got.Bg == "rgba(0, 0, 0, 0)" {
		t.Errorf("dropped badge background %s, want growing's colour %s", got.Bg, got.GrowingColor)
	}
	if got.Registered != "287000" {
		t.Errorf("registered column reads %q, want 287000", got.Registered)
	}
	// A column per counter of the ledger, named as finalizerwatch.Counters
	// names it: a sparse one only where a site counts it, or (dropped) in
	// the runtime build mode, which the document says is on.
	heads := strings.Join(got.Heads, "|")
	for _, c := range finalizerwatch.Counters() {
		col := strings.ReplaceAll(c.Name, "_", " ")
		has := slices.Contains(got.Heads, col)
		if want := !c.Sparse || c.Resource; has != want {
			t.Errorf("the sites table's header %q: column %q drawn %v, want %v", heads, col, has, want)
		}
	}
	// The file:line, shortened from the left, whole in its title, and
	// not cut: the element is as wide as its text and ends inside its
	// cell, in the row and under it.
	const wantLoc = "…/fileserver/staticfiles.go:613"
	wantTitle := droppedSite.File + ":613"
	if got.Loc != wantLoc || got.LocTitle != wantTitle {
		t.Errorf("row's file:line %q (title %q), want %q (title %q)", got.Loc, got.LocTitle, wantLoc, wantTitle)
	}
	if got.LocScroll > got.LocClient || got.LocClient == 0 || got.LocRight > got.CellRight+0.5 {
		t.Errorf("row's file:line clipped: scrollWidth %d, clientWidth %d, right edge %.1f past its cell's %.1f",
			got.LocScroll, got.LocClient, got.LocRight, got.CellRight)
	}
	if got.LocRight > got.ViewWidth || got.WhyLocRight > got.ViewWidth {
		t.Errorf("file:line ends at %.1f (row) and %.1f (sentence), past the window's %.1f", got.LocRight, got.WhyLocRight, got.ViewWidth)
	}
	if got.CellScroll > got.CellClient {
		t.Errorf("the site cell overflows: scrollWidth %d > clientWidth %d", got.CellScroll, got.CellClient)
	}
	if got.FnVisible == 0 {
		t.Errorf("the function name is not shown at all (clientWidth %d)", got.FnClient)
	}
	wantWhy := "leak" + wantLoc + ": " + droppedSite.Words
	if got.Why != wantWhy || got.WhyLoc != wantLoc || got.WhyTitle != wantTitle {
		t.Errorf("sentence under the row %q (line %q, title %q), want %q", got.Why, got.WhyLoc, got.WhyTitle, wantWhy)
	}
	if got.WhyLocScroll > got.WhyLocClient || got.WhyLocClient == 0 || got.WhyLocRight > got.WhyCellRight+0.5 {
		t.Errorf("sentence's file:line clipped: scrollWidth %d, clientWidth %d, right edge %.1f past its cell's %.1f",
			got.WhyLocScroll, got.WhyLocClient, got.WhyLocRight, got.WhyCellRight)
	}
	// The header: the runtime build mode, and the drops in the summary.
	if got.Mode != "runtime build mode on" || got.ModeClass != "on" {
		t.Errorf("header's mode %q (class %q), want runtime build mode on", got.Mode, got.ModeClass)
	}
	if !strings.Contains(got.Summary, "dropped without Close 286990") {
		t.Errorf("header's summary %q does not count the drops", got.Summary)
	}
	screenshot(t, ctx, "gcprobe-live-page-dropped.png")
	pe.check(t, srv.Listener.Addr().String())
}
