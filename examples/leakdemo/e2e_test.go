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
func startDemo(t *testing.T) (base string, out *testkit.SyncBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out = &testkit.SyncBuffer{}
	done := make(chan error, 1)
	go func() { done <- run(ctx, out, "127.0.0.1:0", time.Second) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("demo: %v", err)
		}
	})
	re := regexp.MustCompile(`serving (http://[0-9.:]+)/metrics`)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			return m[1], out
		}
		if time.Now().After(deadline) {
			t.Fatalf("demo printed no address:\n%s", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
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

// The demo's table, /metrics and profile all name the planted leaks.
func TestDemoFindsPlantedLeaks(t *testing.T) {
	base, out := startDemo(t)
	finLine := markerLine(t, "leak: finalizer")
	cleanLine := markerLine(t, "leak: cleanup")
	want := []string{fmt.Sprintf("main.go:%d", finLine), fmt.Sprintf("main.go:%d", cleanLine)}
	deadline := time.Now().Add(60 * time.Second)
	for {
		metrics := string(get(t, base+"/metrics"))
		ok := true
		for _, w := range want {
			if !regexp.MustCompile(`gcprobe_finalizers_suspect_objects\{[^}]*site="[^"]*` + regexp.QuoteMeta(w) + `"[^}]*\} [1-9]`).MatchString(metrics) {
				ok = false
			}
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no suspects at %v after 60s; /metrics:\n%s", want, grepLines(metrics, "suspect"))
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The table is printed every second: poll for one that names both.
	deadline = time.Now().Add(30 * time.Second)
	for {
		table := out.String()
		if strings.Contains(table, want[0]) && strings.Contains(table, want[1]) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the printed table does not name %v after 30s:\n%s", want, table)
		}
		time.Sleep(100 * time.Millisecond)
	}
	table := out.String()
	if !strings.Contains(table, "go tool pprof -top "+base+"/debug/pprof/finalizers") {
		t.Errorf("the demo does not print the pprof command")
	}

	// The profile is valid, and go tool pprof names the leaking function.
	raw := get(t, base+"/debug/pprof/finalizers")
	p, err := profile.ParseData(raw)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.CheckValid(); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "finalizers.pb.gz")
	if err := os.WriteFile(file, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	// Ranked by suspects, the two leaks are the only entries. (In a test
	// binary the demo's functions are named by import path, not main.)
	top, err := exec.Command("go", "tool", "pprof", "-top", "-sample_index=suspect", "-nodefraction=0", file).CombinedOutput()
	if err != nil {
		t.Fatalf("go tool pprof -top: %v\n%s", err, top)
	}
	if !strings.Contains(string(top), "sessions.func1") || !strings.Contains(string(top), "buffers.func1") {
		t.Errorf("go tool pprof -top -sample_index=suspect does not name the leaking functions:\n%s", top)
	}
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
	base, _ := startDemo(t)
	// Let some sites, suspects and pauses appear first.
	deadline := time.Now().Add(30 * time.Second)
	var metrics []byte
	for {
		metrics = get(t, base+"/metrics")
		if bytes.Contains(metrics, []byte("gcprobe_finalizer_duration_seconds_bucket")) && bytes.Contains(metrics, []byte(`kind="cleanup"`)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no per-site series after 30s")
		}
		time.Sleep(200 * time.Millisecond)
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(metrics)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
}

// A real Prometheus server scraping the demo finds the planted leak's line
// in gcprobe_finalizers_suspect_objects through its HTTP query API.
func TestPrometheusFindsPlantedLeak(t *testing.T) {
	prom := tool(t, "GCPROBE_PROMETHEUS", "prometheus")
	base, _ := startDemo(t)
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
	line := markerLine(t, "leak: finalizer")
	query := fmt.Sprintf(`gcprobe_finalizers_suspect_objects{site=~".*main.go:%d"} > 0`, line)
	deadline := time.Now().Add(90 * time.Second)
	for {
		if site, ok := promQuery(t, promAddr, query); ok {
			if !strings.Contains(site, "sessions.func1") {
				t.Fatalf("the series names site %q", site)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus has no result for %s after 90s; its log:\n%s", query, log.String())
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// promQuery runs an instant query and returns the first result's site.
func promQuery(t *testing.T, addr, q string) (string, bool) {
	resp, err := http.Get("http://" + addr + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return "", false // not up yet
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
		return "", false
	}
	v, _ := r.Data.Result[0].Value[1].(string)
	if n, err := strconv.ParseFloat(v, 64); err != nil || n <= 0 {
		return "", false
	}
	return r.Data.Result[0].Metric["site"], true
}
