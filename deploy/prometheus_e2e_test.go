package deploy

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gcprobe/probe/internal/testkit"
)

// prometheusServer returns the prometheus binary to run: $GCPROBE_PROMETHEUS,
// which scripts/testenv.sh exports, else the one on PATH; it skips the test
// when there is none.
func prometheusServer(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("GCPROBE_PROMETHEUS"); p != "" {
		path, err := exec.LookPath(p)
		if err != nil {
			t.Fatalf("GCPROBE_PROMETHEUS=%s: %v", p, err)
		}
		return path
	}
	if path, err := exec.LookPath("prometheus"); err == nil {
		return path
	}
	t.Skip("prometheus not found: run `source scripts/testenv.sh` (installs Debian's prometheus package)")
	return ""
}

// TestPrometheusRunsRulesAndDashboard starts a real Prometheus on loopback
// that scrapes an imitation of the probe's /metrics and loads the alerting
// rules, then checks that every rule evaluates without error and that every
// dashboard query returns data. promtool only checks syntax; this catches a
// query that is valid but can never match what the probe exports (a wrong
// label, a counter read as a gauge, a histogram without _bucket).
func TestPrometheusRunsRulesAndDashboard(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Prometheus server: skipped with -short")
	}
	bin := prometheusServer(t)

	target := httptest.NewServer(fakeProbeMetrics(t))
	t.Cleanup(target.Close)
	targetURL, err := url.Parse(target.URL)
	if err != nil {
		t.Fatal(err)
	}
	rules, err := filepath.Abs(ruleFilePath)
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	config := filepath.Join(dir, "prometheus.yml")
	// 1s scrapes and evaluations: rates have samples within seconds.
	err = os.WriteFile(config, fmt.Appendf(nil, `global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - %q
scrape_configs:
  - job_name: app
    static_configs:
      - targets: [%q]
`, rules, targetURL.Host), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	addr := freeLoopbackAddr(t)
	logPath := filepath.Join(dir, "prometheus.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()

	// t.Context() is cancelled before the cleanups run: Cancel then asks
	// Prometheus to shut down cleanly and WaitDelay bounds how long it may
	// take before it is killed.
	cmd := exec.CommandContext(t.Context(), bin,
		"--config.file="+config,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--log.level=warn")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Wait() })
	fail := func(format string, args ...any) {
		t.Helper()
		logs, _ := os.ReadFile(logPath)
		t.Fatalf(format+"\nprometheus log:\n%s", append(args, logs)...)
	}

	api := "http://" + addr
	// The first samples reach queries a few seconds after start (target
	// discovery runs every 5s): poll, with a bound.
	// 60s for both polls; every 250ms, as an external process is polled.
	deadline := time.Now().Add(60 * time.Second)
	poll := func(what string, done func() (bool, string)) {
		t.Helper()
		testkit.PollEvery(t, time.Until(deadline), 250*time.Millisecond, what, func() (bool, string) {
			ok, state := done()
			if ok {
				return true, ""
			}
			logs, _ := os.ReadFile(logPath)
			return false, fmt.Sprintf("%s\nprometheus log:\n%s", state, logs)
		})
	}

	poll("every alerting rule to evaluate", func() (bool, string) {
		var body struct {
			Data struct {
				Groups []struct {
					Name  string `json:"name"`
					Rules []struct {
						Name      string `json:"name"`
						Health    string `json:"health"`
						LastError string `json:"lastError"`
					} `json:"rules"`
				} `json:"groups"`
			} `json:"data"`
		}
		if err := getJSON(api+"/api/v1/rules", &body); err != nil {
			return false, err.Error()
		}
		var pending []string
		n := 0
		for _, g := range body.Data.Groups {
			for _, r := range g.Rules {
				n++
				if r.Health == "err" {
					fail("rule %s/%s: %s", g.Name, r.Name, r.LastError)
				}
				if r.Health != "ok" {
					pending = append(pending, r.Name+"="+r.Health)
				}
			}
		}
		if want := len(alertRules(t)); n != want {
			return false, fmt.Sprintf("%d rules loaded, want %d", n, want)
		}
		return len(pending) == 0, strings.Join(pending, ", ")
	})

	queries := dashboardQueries(t, loadDashboard(t))
	poll("every dashboard query to return data", func() (bool, string) {
		var empty []string
		for _, q := range queries {
			expr := grafanaVarRE.ReplaceAllStringFunc(q.Expr, func(v string) string {
				if strings.Contains(v, "interval") || strings.Contains(v, "range") {
					return "30s"
				}
				return ".*"
			})
			var body struct {
				Status string `json:"status"`
				Error  string `json:"error"`
				Data   struct {
					Result []json.RawMessage `json:"result"`
				} `json:"data"`
			}
			if err := getJSON(api+"/api/v1/query?query="+url.QueryEscape(expr), &body); err != nil {
				return false, err.Error()
			}
			if body.Status != "success" {
				fail("%s: query %s: %s", q.Where, expr, body.Error)
			}
			if len(body.Data.Result) == 0 {
				empty = append(empty, q.Where+": "+expr)
			}
		}
		return len(empty) == 0, "no data yet for:\n" + strings.Join(empty, "\n")
	})
}

// getJSON decodes the JSON body of a GET. The Prometheus API answers errors
// with a JSON body as well, so any status is decoded.
func getJSON(u string, v any) error {
	resp, err := http.Get(u)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}

// freeLoopbackAddr returns a loopback address with a port that was free a
// moment ago.
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// fakeProbeMetrics serves every metric the probe exports, with the contract's
// names and labels, moving on each scrape so that rates and quantiles have
// data. It stands in for the real collector until that lands; then this
// test should scrape the real one.
func fakeProbeMetrics(t *testing.T) http.Handler {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	site := []string{"kind", "site"}
	kind := []string{"kind"}
	k8s := []string{"group", "version", "kind", "finalizer"}
	gauge := func(name string, labels []string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: name + " (test)."}, labels)
	}
	counter := func(name string, labels []string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: name + " (test)."}, labels)
	}
	histogram := func(name string, labels []string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: name + " (test).",
			Buckets: prometheus.ExponentialBuckets(1e-6, 4, 12)}, labels)
	}
	var (
		outstanding = gauge("gcprobe_finalizers_outstanding", site)
		registered  = counter("gcprobe_finalizers_registered_total", site)
		executed    = counter("gcprobe_finalizers_executed_total", site)
		cleared     = counter("gcprobe_finalizers_cleared_total", site)
		suspects    = gauge("gcprobe_finalizers_suspect_objects", site)
		growing     = gauge("gcprobe_finalizers_growing", site)
		duration    = histogram("gcprobe_finalizer_duration_seconds", site)
		queueLen    = gauge("gcprobe_finalizer_queue_length", kind)
		latency     = gauge("gcprobe_finalizer_queue_latency_seconds", kind)
		queued      = counter("gcprobe_finalizers_queued_total", kind)
		runtimeExec = counter("gcprobe_finalizers_runtime_executed_total", kind)
		unwatched   = counter("gcprobe_finalizers_unwatched_total", kind)
		pause       = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "gcprobe_gc_pause_seconds",
			Help: "test", Buckets: prometheus.ExponentialBuckets(1e-6, 4, 12)})
		forced = prometheus.NewCounter(prometheus.CounterOpts{Name: "gcprobe_gc_forced_cycles_total", Help: "test"})
		cpu    = prometheus.NewGauge(prometheus.GaugeOpts{Name: "gcprobe_gc_cpu_fraction", Help: "test"})
		firing = gauge("gcprobe_detector_firing", []string{"detector"})
		termN  = gauge("gcprobe_k8s_terminating_objects", k8s)
		// Why the GC works hard.
		cpuClass  = gauge("gcprobe_gc_cpu_class_fraction", []string{"class"})
		siteAlloc = gauge("gcprobe_alloc_site_bytes_per_second", []string{"site"})
		siteGrow  = gauge("gcprobe_alloc_site_growth_bytes", []string{"site"})
		termAt    = gauge("gcprobe_k8s_terminating_oldest_seconds", k8s)
	)
	reg.MustRegister(outstanding, registered, executed, cleared, suspects, growing, duration,
		queueLen, latency, queued, runtimeExec, unwatched, pause, forced, cpu, firing, termN, termAt,
		cpuClass, siteAlloc, siteGrow)

	sites := [][]string{
		{"finalizer", "main.newConn /app/main.go:42"},
		{"cleanup", "main.openFile /app/files.go:17"},
		{"finalizer", "other"},
	}
	scrapes := 0.0
	bump := func() {
		scrapes++
		for i, s := range sites {
			n := float64(i + 1)
			outstanding.WithLabelValues(s...).Set(100 * n)
			suspects.WithLabelValues(s...).Set(10*n + scrapes)
			growing.WithLabelValues(s...).Set(float64(i % 2))
			registered.WithLabelValues(s...).Add(5 * n)
			executed.WithLabelValues(s...).Add(3 * n)
			cleared.WithLabelValues(s...).Add(n)
			duration.WithLabelValues(s...).Observe(1e-4 * n)
		}
		for _, k := range []string{"finalizer", "cleanup"} {
			queueLen.WithLabelValues(k).Set(12)
			latency.WithLabelValues(k).Set(0.002)
			queued.WithLabelValues(k).Add(10)
			runtimeExec.WithLabelValues(k).Add(9)
			unwatched.WithLabelValues(k).Add(2)
		}
		pause.Observe(5e-5)
		pause.Observe(3e-4)
		forced.Inc()
		cpu.Set(0.03)
		for _, d := range []string{"finalizer_queue_stalled", "forced_gc", "mcache_inuse", "queue_latency",
			"allocation_driven", "live_heap_growth", "memory_limit_pressure", "stopping_latency", "assist_heavy"} {
			firing.WithLabelValues(d).Set(0)
		}
		for _, c := range []string{"assist", "dedicated", "idle", "pause"} {
			cpuClass.WithLabelValues(c).Set(0.01)
		}
		siteAlloc.WithLabelValues("main.deepCopy /app/informer.go:88").Set(2.4e6)
		siteGrow.WithLabelValues("main.(*cache).put /app/cache.go:31").Set(6e6 * scrapes)
		termN.WithLabelValues("apps", "v1", "Deployment", "example.gcprobe.dev/cleanup").Set(2)
		termAt.WithLabelValues("apps", "v1", "Deployment", "example.gcprobe.dev/cleanup").Set(30 + scrapes)
	}
	metrics := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	mux := http.NewServeMux()
	// Prometheus scrapes a target one request at a time, but the handler
	// runs on the server's goroutines: the lock guards the scrape count.
	var mu sync.Mutex
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		bump()
		mu.Unlock()
		metrics.ServeHTTP(w, r)
	})
	return mux
}
