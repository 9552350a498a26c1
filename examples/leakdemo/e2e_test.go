package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/gcprobe/probe/internal/testkit"
)

// startDemo runs the demo in-process on a free loopback port and returns
// its base URL; the demo stops when the test ends.
func startDemo(t *testing.T, topK int) (base string, out *testkit.SyncBuffer) {
	t.Helper()
	return startPacedDemo(t, topK, timedPacer{})
}

// startPacedDemo is startDemo with the queue trouble at pace's pace.
func startPacedDemo(t *testing.T, topK int, pace queuePacer) (base string, out *testkit.SyncBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out = &testkit.SyncBuffer{}
	done := make(chan error, 1)
	go func() { done <- run(ctx, out, "127.0.0.1:0", time.Second, topK, pace) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("demo: %v", err)
		}
	})
	re := regexp.MustCompile(`serving (http://[0-9.:]+)/metrics`)
	var m []string
	testkit.PollEvery(t, 10*time.Second, 10*time.Millisecond, "the demo to print its address", func() (bool, string) {
		printed := out.String()
		m = re.FindStringSubmatch(printed)
		return m != nil, printed
	})
	return m[1], out
}

// markerLine returns the line of main.go carrying the comment marker.
func markerLine(t *testing.T, marker string) int {
	t.Helper()
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range strings.Split(string(src), "\n") {
		if strings.HasSuffix(l, "// "+marker) {
			return i + 1
		}
	}
	t.Fatalf("no %q in main.go", marker)
	return 0
}

func get(t *testing.T, u string) []byte {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %v", u, resp.StatusCode, err)
	}
	return b
}

func tool(t *testing.T, env, name string) string {
	if p := os.Getenv(env); p != "" {
		return p
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	t.Skipf("%s not found: run `source scripts/testenv.sh` (it installs Debian's prometheus package, which ships %s)", name, name)
	return ""
}

// tableRow is one row of the printed table's top sites.
type tableRow struct {
	site, kind, class string
}

// lastTable returns the rows of the last complete top-sites table in out.
func lastTable(out string) []tableRow {
	i := strings.LastIndex(out, "\ntop sites ")
	if i < 0 {
		return nil
	}
	var rows []tableRow
	lines := strings.Split(out[i+1:], "\n")
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if len(f) < 4 || strings.HasSuffix(f[0], ":") { // a blank line, "overflow:", ...
			break
		}
		rows = append(rows, tableRow{site: f[0] + " " + f[1], kind: f[2], class: f[3]})
	}
	return rows
}

// The demo's table, /metrics and the profile's default view all put the
// two planted leaks first, classed growing, and show the cache of 3000
// long-lived objects as stable, below them.
func TestDemoFindsPlantedLeaks(t *testing.T) {
	base, out := startDemo(t, 10)
	finLine := markerLine(t, "leak: finalizer")
	cleanLine := markerLine(t, "leak: cleanup")
	cacheLine := markerLine(t, "stable: cache")
	leaks := []string{fmt.Sprintf("main.go:%d", finLine), fmt.Sprintf("main.go:%d", cleanLine)}
	cache := fmt.Sprintf("main.go:%d", cacheLine)

	// The table is printed every second: poll for one whose first two
	// rows are the leaks, growing, with the cache among the rest, stable.
	tableOK := func(rows []tableRow) bool {
		if len(rows) < 3 {
			return false
		}
		for _, r := range rows[:2] {
			if r.class != "growing" || !(strings.HasSuffix(r.site, " "+leaks[0]) || strings.HasSuffix(r.site, " "+leaks[1])) {
				return false
			}
		}
		for _, r := range rows[2:] {
			if strings.HasSuffix(r.site, " "+cache) {
				return r.class == "stable" && r.kind == "finalizer"
			}
		}
		return false
	}
	testkit.PollEvery(t, 90*time.Second, 100*time.Millisecond,
		fmt.Sprintf("the table to lead with the growing leaks %v and show the cache %s as stable", leaks, cache),
		func() (bool, string) {
			printed := out.String()
			return tableOK(lastTable(printed)), printed
		})
	table := out.String()
	if !strings.Contains(table, "go tool pprof -top -lines "+base+"/debug/pprof/finalizers") {
		t.Errorf("the demo does not print the pprof command")
	}
	if i := strings.LastIndex(table, "\ntop sites "); strings.Contains(table[i:], "too early") {
		t.Errorf("the last table still says it is too early to judge:\n%s", table[i:])
	}

	// /metrics: both leaks growing, the cache stable with all its suspects.
	testkit.PollEvery(t, 60*time.Second, 200*time.Millisecond,
		fmt.Sprintf("/metrics to show %v growing and %s stable with 3000 suspects", leaks, cache),
		func() (bool, string) {
			metrics := string(get(t, base+"/metrics"))
			ok := true
			for _, w := range leaks {
				if !regexp.MustCompile(`gcprobe_finalizers_growing\{[^}]*site="[^"]*` + regexp.QuoteMeta(w) + `"[^}]*\} 1\n`).MatchString(metrics) {
					ok = false
				}
			}
			if !regexp.MustCompile(`gcprobe_finalizers_growing\{kind="finalizer",site="[^"]*`+regexp.QuoteMeta(cache)+`"\} 0\n`).MatchString(metrics) ||
				!regexp.MustCompile(`gcprobe_finalizers_suspect_objects\{kind="finalizer",site="[^"]*`+regexp.QuoteMeta(cache)+`"\} 3000\n`).MatchString(metrics) {
				ok = false
			}
			return ok, grepLines(metrics, "gcprobe_finalizers_growing") + grepLines(metrics, "suspect_objects")
		})

	// The profile is valid, and its default view (go tool pprof -top
	// -lines, as the demo prints it) lists the two leaking lines first and
	// not the cache. (In a test binary the demo's functions are named by
	// import path, not main.)
	testkit.PollEvery(t, 60*time.Second, 500*time.Millisecond,
		fmt.Sprintf("go tool pprof -top -lines to list %v first, without %s", leaks, cache),
		func() (bool, string) {
			raw := get(t, base+"/debug/pprof/finalizers")
			p, err := profile.ParseData(raw)
			if err != nil {
				t.Fatal(err)
			}
			if err := p.CheckValid(); err != nil {
				t.Fatal(err)
			}
			if p.DefaultSampleType != "leaked" {
				t.Fatalf("default sample type %q, want leaked", p.DefaultSampleType)
			}
			file := filepath.Join(t.TempDir(), "finalizers.pb.gz")
			if err := os.WriteFile(file, raw, 0o644); err != nil {
				t.Fatal(err)
			}
			top, err := exec.Command("go", "tool", "pprof", "-top", "-lines", file).CombinedOutput()
			if err != nil {
				t.Fatalf("go tool pprof -top -lines: %v\n%s", err, top)
			}
			rows := pprofRows(string(top))
			if len(rows) >= 2 && !strings.Contains(string(top), cache) &&
				(strings.Contains(rows[0], leaks[0]) && strings.Contains(rows[1], leaks[1]) ||
					strings.Contains(rows[0], leaks[1]) && strings.Contains(rows[1], leaks[0])) {
				if !strings.Contains(string(top), "sessions.func1") || !strings.Contains(string(top), "buffers.func1") {
					t.Errorf("go tool pprof -top -lines does not name the leaking functions:\n%s", top)
				}
				return true, ""
			}
			return false, string(top)
		})
}

// pprofRows returns the rows of go tool pprof -top's table.
func pprofRows(out string) []string {
	_, table, ok := strings.Cut(out, "flat  flat%   sum%        cum   cum%\n")
	if !ok {
		return nil
	}
	return strings.Split(strings.TrimSpace(table), "\n")
}

// With two per-site series (K is shared by the kinds), Prometheus gets the
// two leaks' series, one of each kind, not the cache's, though the cache
// has more suspects than both.
func TestDemoTopKHoldsTheLeaks(t *testing.T) {
	base, _ := startDemo(t, 2)
	want := map[string]string{
		"finalizer": fmt.Sprintf("main.go:%d", markerLine(t, "leak: finalizer")),
		"cleanup":   fmt.Sprintf("main.go:%d", markerLine(t, "leak: cleanup")),
	}
	re := regexp.MustCompile(`gcprobe_finalizers_growing\{kind="(\w+)",site="([^"]*)"\} (\d+)\n`)
	testkit.PollEvery(t, 90*time.Second, 200*time.Millisecond, fmt.Sprintf("the top-2 series to be the growing leaks %v", want), func() (bool, string) {
		metrics := string(get(t, base+"/metrics"))
		got := map[string]string{}
		for _, m := range re.FindAllStringSubmatch(metrics, -1) {
			if m[2] != "other" && m[3] == "1" {
				got[m[1]] = m[2]
			}
		}
		ok := len(got) == 2
		for kind, w := range want {
			ok = ok && strings.HasSuffix(got[kind], "/"+w)
		}
		return ok, grepLines(metrics, "gcprobe_finalizers_growing") + grepLines(metrics, "suspect_objects")
	})
}

func grepLines(s, sub string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// promtool check metrics is clean on the demo's /metrics.
func TestDemoMetricsPassPromtool(t *testing.T) {
	promtool := tool(t, "GCPROBE_PROMTOOL", "promtool")
	base, _ := startDemo(t, 10)
	// Let some sites, suspects and pauses appear first.
	var metrics []byte
	testkit.PollEvery(t, 30*time.Second, 200*time.Millisecond, "per-site series", func() (bool, string) {
		metrics = get(t, base+"/metrics")
		return bytes.Contains(metrics, []byte("gcprobe_finalizer_duration_seconds_bucket")) && bytes.Contains(metrics, []byte(`kind="cleanup"`)), ""
	})
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(metrics)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
}

// A real Prometheus server scraping the demo (two per-site series) finds
// exactly the two planted leaks' lines growing through its HTTP query API,
// not the bigger cache.
func TestPrometheusFindsPlantedLeak(t *testing.T) {
	prom := tool(t, "GCPROBE_PROMETHEUS", "prometheus")
	base, _ := startDemo(t, 2)
	target := strings.TrimPrefix(base, "http://")
	dir := t.TempDir()
	cfg := fmt.Sprintf("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: leakdemo\n    static_configs:\n      - targets: [%q]\n", target)
	if err := os.WriteFile(filepath.Join(dir, "prom.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	promAddr := freeAddr(t)
	var log testkit.SyncBuffer
	cmd := exec.Command(prom, "--config.file="+filepath.Join(dir, "prom.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+promAddr)
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	want := map[string]*regexp.Regexp{
		"finalizer": regexp.MustCompile(fmt.Sprintf(`\.sessions\.func1 .*/main\.go:%d$`, markerLine(t, "leak: finalizer"))),
		"cleanup":   regexp.MustCompile(fmt.Sprintf(`\.buffers\.func1 .*/main\.go:%d$`, markerLine(t, "leak: cleanup"))),
	}
	// The query the README and the alert rules use.
	const query = `gcprobe_finalizers_growing{site!="other"} == 1 and gcprobe_finalizers_suspect_objects > 0`
	// 40 s on a quiet machine. The finalizer leak's clock moves only when
	// the demo's backed-up finalizer queue lets it (the demo's point), and
	// a site is growing once its new highs span the demo's suspect age in
	// that clock's cycles: on a loaded machine, with -race, the queue can
	// stay stalled for two minutes (seen in a whole .ci/run).
	var last map[string]string
	testkit.PollEvery(t, 240*time.Second, 500*time.Millisecond, fmt.Sprintf("Prometheus to answer %s with %v", query, want), func() (bool, string) {
		if got, ok := promQuery(t, promAddr, query); ok {
			last = got
			match := len(got) == len(want)
			for kind, w := range want {
				match = match && w.MatchString(got[kind])
			}
			if match {
				return true, ""
			}
		}
		return false, fmt.Sprintf("answers %v; its log:\n%s", last, log.String())
	})
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// promQuery runs an instant query and returns the site of each result by
// kind.
func promQuery(t *testing.T, addr, q string) (map[string]string, bool) {
	resp, err := http.Get("http://" + addr + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return nil, false // not up yet
	}
	defer resp.Body.Close()
	var r struct {
		Status string
		Data   struct {
			Result []struct {
				Metric map[string]string
				Value  []any
			}
		}
	}
	if err := json.NewDecoder(bufio.NewReader(resp.Body)).Decode(&r); err != nil || r.Status != "success" || len(r.Data.Result) == 0 {
		return nil, false
	}
	out := map[string]string{}
	for _, res := range r.Data.Result {
		v, _ := res.Value[1].(string)
		if n, err := strconv.ParseFloat(v, 64); err != nil || n <= 0 {
			return nil, false
		}
		out[res.Metric["kind"]] = res.Metric["site"]
	}
	return out, true
}
