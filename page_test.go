package probe_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gcprobe/probe"
	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/internal/testkit"
)

// getPage GETs url and returns the status, the Content-Type and the body.
func getPage(t *testing.T, client *http.Client, method, url string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, body
}

// noRedirect is a client that reports redirects rather than following them.
var noRedirect = &http.Client{
	Timeout:       15 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// TestPageDataSchema plants a growing leak under a probe with its own
// listener and checks the page's JSON document: every documented field
// present with its JSON type, the planted line the first site, growing,
// with one suspect count per history row, the history one row per cycle,
// increasing, bounded, and the pauses one per cycle.
func TestPageDataSchema(t *testing.T) {
	line := testkit.MarkerLine(t, "logs_test.go", "grow-leak")
	w := newWatcher(t)
	p, err := probe.Start(probe.WithRegisterer(prometheus.NewRegistry()), probe.WithWatcher(w), probe.WithSuspectAge(0), probe.WithListenAddr("127.0.0.1:0"),
		probe.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	defer noRedirect.CloseIdleConnections()
	t.Cleanup(func() { grownMu.Lock(); grown = nil; grownMu.Unlock() })
	url := "http://" + p.Addr().String() + probe.PagePath + probe.PageDataPath
	var d probe.PageData
	var raw []byte
	testkit.Poll(t, 60*time.Second, "the planted leak as the page's first site, growing, over 3 rows of history", func() bool {
		growLeak(w, 10)
		runtime.GC()
		code, h, body := getPage(t, noRedirect, "GET", url)
		if code != 200 || h.Get("Content-Type") != "application/json" {
			t.Fatalf("data.json: %d %q", code, h.Get("Content-Type"))
		}
		d, raw = probe.PageData{}, body
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&d); err != nil {
			t.Fatalf("data.json does not decode into PageData: %v\n%s", err, body)
		}
		return len(d.Sites) > 0 && d.Sites[0].Class == "growing" && len(d.History) >= 3 &&
			d.Sites[0].Line == line && strings.HasSuffix(d.Sites[0].Function, "growLeak")
	})
	// The JSON types, as a script reads them.
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"schema": "number", "time": "string", "history_cycles": "number", "more_cycles_needed": "number", "more_seconds_needed": "number", "ledger_cycles": "object",
		"runtime_mode": "bool", "gc": "object", "queues": "object", "totals": "object", "history": "array",
		"pauses": "array", "sites": "array", "running": "array", "firing": "array", "events": "array",
		"overflow": "object", "gc_cause": "object", "allocating_sites": "object", "links": "object", "counters": "array",
	}
	for k, typ := range want {
		if got := jsonType(m[k]); got != typ {
			t.Errorf("%s: JSON %s, want %s", k, got, typ)
		}
	}
	for k := range m {
		if _, ok := want[k]; !ok {
			t.Errorf("undocumented field %q (add it to the test and to PageData's doc)", k)
		}
	}
	site := m["sites"].([]any)[0].(map[string]any)
	for k, typ := range map[string]string{"kind": "string", "site": "string", "function": "string", "file": "string",
		"line": "number", "class": "string", "verdict": "string", "growth": "number", "registered": "number", "executed": "number",
		"outstanding": "number", "suspect": "number", "dropped": "number", "counts": "array", "suspects": "array", "stack": "array"} {
		if got := jsonType(site[k]); got != typ {
			t.Errorf("sites[0].%s: JSON %s, want %s", k, got, typ)
		}
	}
	if d.Schema != probe.PageSchema || d.HistoryCycles != probe.PageHistoryCycles {
		t.Errorf("schema %d, history_cycles %d", d.Schema, d.HistoryCycles)
	}
	if d.Links != (probe.PageLinks{Profile: "/debug/pprof/finalizers", ProfileText: "/debug/pprof/finalizers?debug=1", Metrics: "/metrics"}) {
		t.Errorf("links %+v", d.Links)
	}
	gc := m["gc_cause"].(map[string]any)
	if jsonType(gc["causes"]) != "array" {
		t.Errorf("gc_cause.causes: JSON %s, want array", jsonType(gc["causes"]))
	}
	al := m["allocating_sites"].(map[string]any)
	for _, k := range []string{"allocating", "growing"} {
		if jsonType(al[k]) != "array" {
			t.Errorf("allocating_sites.%s: JSON %s, want array", k, jsonType(al[k]))
		}
	}
	s := d.Sites[0]
	if s.Kind != "finalizer" || s.Growth == 0 || s.Suspect == 0 || s.Outstanding < s.Suspect {
		t.Errorf("first site %+v", s)
	}
	if len(s.Suspects) != len(d.History) {
		t.Errorf("%d suspect counts for %d rows of history", len(s.Suspects), len(d.History))
	}
	if n := s.Suspects[len(s.Suspects)-1]; n == nil || *n == 0 {
		t.Errorf("no suspects at the latest cycle: %v", n)
	}
	if len(s.Stack) == 0 || s.Stack[0].Line != line || !strings.HasSuffix(s.Stack[0].File, "logs_test.go") {
		t.Errorf("stack %+v does not begin at logs_test.go:%d", s.Stack, line)
	}
	if len(d.History) > probe.PageHistoryCycles {
		t.Errorf("%d rows of history, more than %d", len(d.History), probe.PageHistoryCycles)
	}
	for i := 1; i < len(d.History); i++ {
		if d.History[i].Cycle <= d.History[i-1].Cycle {
			t.Errorf("history cycles not increasing: %d then %d", d.History[i-1].Cycle, d.History[i].Cycle)
		}
	}
	for i := 1; i < len(d.Pauses); i++ {
		if d.Pauses[i].Cycle != d.Pauses[i-1].Cycle+1 {
			t.Errorf("pauses not one per cycle: %d then %d", d.Pauses[i-1].Cycle, d.Pauses[i].Cycle)
		}
	}
	if len(d.Pauses) == 0 || d.Pauses[len(d.Pauses)-1].Cycle < d.History[len(d.History)-1].Cycle {
		t.Errorf("pauses end before the history does: %d pauses", len(d.Pauses))
	}
	if d.GC.Cycles == 0 || d.GC.HeapGoal == 0 || d.Totals["finalizer"].Registered == 0 {
		t.Errorf("gc %+v, totals %+v", d.GC, d.Totals)
	}
}

// pageCountsObj is the object of TestPageCountersAreTheLedgers's site.
type pageCountsObj struct{ _ [16]byte }

// TestPageCountersAreTheLedgers: the page's document describes every
// counter of the ledger (finalizerwatch.Counters), in its order, and
// gives every site and total a count of each, the ledger's own: the
// page's columns are drawn from these, so a counter missing from the
// document is missing from the page. A site with finalizers cleared gives
// the cleared column, which the page's named fields lack, its count.
func TestPageCountersAreTheLedgers(t *testing.T) {
	w := newWatcher(t)
	p, err := probe.Start(probe.WithRegisterer(prometheus.NewRegistry()), probe.WithWatcher(w),
		probe.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	objs := make([]*pageCountsObj, 5)
	for i := range objs {
		objs[i] = &pageCountsObj{}
		w.SetFinalizer(objs[i], func(*pageCountsObj) {}) // marker: page-counts
	}
	w.SetFinalizer(objs[0], nil)
	w.SetFinalizer(objs[1], nil)
	line := testkit.MarkerLine(t, "page_test.go", "page-counts")

	rec := httptest.NewRecorder()
	p.PageHandler().ServeHTTP(rec, httptest.NewRequest("GET", probe.PagePath+probe.PageDataPath, nil))
	var d probe.PageData
	if err := json.Unmarshal(rec.Body.Bytes(), &d); err != nil {
		t.Fatalf("data.json: %d %v", rec.Code, err)
	}
	runtime.KeepAlive(objs)
	cs := finalizerwatch.Counters()
	if len(d.Counters) != len(cs) {
		t.Fatalf("the document describes %d counters, the ledger has %d", len(d.Counters), len(cs))
	}
	for i, c := range cs {
		want := probe.PageCounter{Name: c.Name, Help: c.Help, Gauge: c.Gauge, Sparse: c.Sparse, Resource: c.Resource}
		if d.Counters[i] != want {
			t.Errorf("counters[%d] = %+v, want %+v", i, d.Counters[i], want)
		}
	}
	var sn finalizerwatch.Snapshot
	w.Read(&sn, finalizerwatch.ReadOptions{})
	var site *probe.PageSite
	for i := range d.Sites {
		if d.Sites[i].Line == line && strings.HasSuffix(d.Sites[i].File, "page_test.go") {
			site = &d.Sites[i]
		}
	}
	if site == nil {
		t.Fatalf("no site at page_test.go:%d among %d", line, len(d.Sites))
	}
	byName := map[string]uint64{}
	for i, c := range cs {
		if len(site.Counts) != len(cs) {
			t.Fatalf("the site has %d counts, want %d", len(site.Counts), len(cs))
		}
		byName[c.Name] = site.Counts[i]
	}
	if byName["registered"] != 5 || byName["cleared"] != 2 || byName["outstanding"] != 3 || byName["executed"] != 0 {
		t.Errorf("the site's counts %v, want 5 registered, 2 cleared, 3 outstanding", byName)
	}
	for k, tot := range d.Totals {
		kind := &sn.Kinds[finalizerwatch.KindFinalizer]
		if k == "cleanup" {
			kind = &sn.Kinds[finalizerwatch.KindCleanup]
		}
		for i, c := range cs {
			if len(tot.Counts) != len(cs) || tot.Counts[i] != c.Value(&kind.Counts) {
				t.Errorf("totals[%s].counts %v, want the ledger's %s %d", k, tot.Counts, c.Name, c.Value(&kind.Counts))
				break
			}
		}
	}
}

func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "bool"
	case float64:
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

// TestPageRoutes: the listener serves the page, its assets and its data
// under /debug/gcprobe/, redirects the folder without its slash, and
// answers hostile requests as it answers them on its other paths.
func TestPageRoutes(t *testing.T) {
	p, err := probe.Start(probe.WithRegisterer(prometheus.NewRegistry()), probe.WithListenAddr("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	defer noRedirect.CloseIdleConnections()
	base := "http://" + p.Addr().String()
	tests := []struct {
		method, path string
		want         int
		wantType     string
		wantLocation string
	}{
		{"GET", "/debug/gcprobe/", 200, "text/html; charset=utf-8", ""},
		{"HEAD", "/debug/gcprobe/", 200, "text/html; charset=utf-8", ""},
		{"GET", "/debug/gcprobe/page.js", 200, "text/javascript; charset=utf-8", ""},
		{"GET", "/debug/gcprobe/page.css", 200, "text/css; charset=utf-8", ""},
		{"GET", "/debug/gcprobe/data.json", 200, "application/json", ""},
		{"GET", "/debug/gcprobe/data.json?x=%zz&debug=1&" + strings.Repeat("a", 4000), 200, "application/json", ""},
		{"GET", "/debug/gcprobe", 301, "", "/debug/gcprobe/"},
		{"POST", "/debug/gcprobe/data.json", 405, "", ""},
		{"PUT", "/debug/gcprobe/", 405, "", ""},
		{"GET", "/debug/gcprobe/index.html", 404, "", ""},
		{"GET", "/debug/gcprobe/x/", 404, "", ""},
		{"GET", "/debug/gcprobe/page.go", 404, "", ""},
		{"GET", "/debug/gcprobe/../../metrics", 404, "", ""},
		{"GET", "/debug/gcprobe/%2e%2e/data.json", 404, "", ""},
		{"GET", "/debug/gcprobe//evil.example/", 404, "", ""},
		{"GET", "//evil.example/debug/gcprobe", 404, "", ""},
	}
	for _, tt := range tests {
		code, h, body := getPage(t, noRedirect, tt.method, base+tt.path)
		if code != tt.want {
			t.Errorf("%s %s: %d, want %d", tt.method, tt.path, code, tt.want)
			continue
		}
		if tt.wantType != "" && h.Get("Content-Type") != tt.wantType {
			t.Errorf("%s %s: Content-Type %q, want %q", tt.method, tt.path, h.Get("Content-Type"), tt.wantType)
		}
		if tt.wantLocation != "" && h.Get("Location") != tt.wantLocation {
			t.Errorf("%s %s: Location %q, want %q", tt.method, tt.path, h.Get("Location"), tt.wantLocation)
		}
		if code == 200 {
			if csp := h.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "connect-src 'self'") {
				t.Errorf("%s %s: Content-Security-Policy %q", tt.method, tt.path, csp)
			}
			if h.Get("X-Content-Type-Options") != "nosniff" {
				t.Errorf("%s %s: no nosniff", tt.method, tt.path)
			}
			if tt.method == "HEAD" && len(body) != 0 {
				t.Errorf("HEAD %s: %d bytes of body", tt.path, len(body))
			}
		}
	}
}

// TestPageHandlerMountedElsewhere: PageHandler works under any prefix (its
// page refers to its files relatively), redirects its folder without the
// slash relatively, and answers 503 after Stop, 500 on a zero Probe.
func TestPageHandlerMountedElsewhere(t *testing.T) {
	p, err := probe.New(probe.WithRegisterer(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ops/ui/", http.StripPrefix("/ops", p.PageHandler()))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	defer noRedirect.CloseIdleConnections()
	code, _, body := getPage(t, noRedirect, "GET", srv.URL+"/ops/ui/")
	if code != 200 || !bytes.Contains(body, []byte(`src="page.js"`)) || bytes.Contains(body, []byte("http")) {
		t.Fatalf("page under a prefix: %d\n%s", code, body)
	}
	if code, _, _ := getPage(t, noRedirect, "GET", srv.URL+"/ops/ui/data.json"); code != 200 {
		t.Fatalf("data.json before Start: %d", code)
	}
	rec := httptest.NewRecorder()
	p.PageHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/ui", nil))
	if rec.Code != 301 || rec.Header().Get("Location") != "./ui/" {
		t.Fatalf("/ui: %d, Location %q, want 301 ./ui/", rec.Code, rec.Header().Get("Location"))
	}
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	if code, _, _ := getPage(t, noRedirect, "GET", srv.URL+"/ops/ui/data.json"); code != 503 {
		t.Fatalf("data.json after Stop: %d, want 503", code)
	}
	rec = httptest.NewRecorder()
	(&probe.Probe{}).PageHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != 500 || !strings.Contains(rec.Body.String(), "PageHandler") {
		t.Fatalf("zero Probe: %d %s", rec.Code, rec.Body.String())
	}
}

// TestPageDataConcurrent: many readers at once get the document or a
// 503, never an error or a hang, and Stop waits for them.
func TestPageDataConcurrent(t *testing.T) {
	p, err := probe.Start(probe.WithRegisterer(prometheus.NewRegistry()), probe.WithListenAddr("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	client := &http.Client{Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	url := "http://" + p.Addr().String() + probe.PagePath + probe.PageDataPath
	var wg sync.WaitGroup
	errs := make(chan string, 16*5)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				resp, err := client.Get(url)
				if err != nil {
					errs <- err.Error()
					return
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 && resp.StatusCode != 503 {
					errs <- fmt.Sprintf("%d: %s", resp.StatusCode, body)
				} else if resp.StatusCode == 200 && !json.Valid(body) {
					errs <- "invalid JSON"
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// TestPageWeight keeps the page small: its three files together.
func TestPageWeight(t *testing.T) {
	p, err := probe.New(probe.WithRegisterer(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	total := 0
	for _, name := range []string{"", "page.js", "page.css"} {
		rec := httptest.NewRecorder()
		p.PageHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/debug/gcprobe/"+name, nil))
		if rec.Code != 200 {
			t.Fatalf("%q: %d", name, rec.Code)
		}
		total += rec.Body.Len()
	}
	t.Logf("the page weighs %d bytes (HTML, script and style, uncompressed)", total)
	if total > 32<<10 {
		t.Errorf("the page weighs %d bytes, more than 32 KiB", total)
	}
}

// FuzzPageHandlerPaths: whatever the path and method, the page handler
// answers 200, 301, 404 or 405, never panics, and redirects only
// relatively, to a folder of the request's own (no other host).
func FuzzPageHandlerPaths(f *testing.F) {
	p, err := probe.New(probe.WithRegisterer(prometheus.NewRegistry()))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { p.Stop() })
	h := p.PageHandler()
	for _, s := range []string{"/debug/gcprobe/", "/debug/gcprobe", "/x/data.json", "//evil.example", "/a/%2f..", "/\x00", "/debug/gcprobe/page.js/", "/:x", "/a\\b"} {
		f.Add("GET", s)
	}
	f.Add("POST", "/debug/gcprobe/")
	f.Fuzz(func(t *testing.T, method, path string) {
		req := &http.Request{Method: method, URL: &url.URL{Path: path}, Header: http.Header{}, Host: "probe"}
		req = req.WithContext(t.Context())
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch rec.Code {
		case 200, 404, 405:
		case 301:
			loc := rec.Header().Get("Location")
			if !strings.HasPrefix(loc, "./") || strings.Contains(loc, "//") || !strings.HasSuffix(loc, "/") {
				t.Fatalf("%s %q redirected to %q", method, path, loc)
			}
		default:
			t.Fatalf("%s %q answered %d", method, path, rec.Code)
		}
	})
}
