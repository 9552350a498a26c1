package probe_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/gcprobe/probe"
	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/internal/testkit"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// The runtime's own cleanup and finalizer goroutines, caught
		// while they run a callback: goleak v1.3.0 does not know them as
		// system goroutines.
		goleak.IgnoreAnyFunction("runtime.runCleanups"),
		goleak.IgnoreAnyFunction("runtime.runFinalizers"))
}

// What controller-runtime's manager asks of a Runnable, without importing
// it.
var (
	_ interface{ Start(context.Context) error } = (*probe.Probe)(nil)
	_ interface{ NeedLeaderElection() bool }    = (*probe.Probe)(nil)
)

func newWatcher(t *testing.T) *finalizerwatch.Watcher {
	t.Helper()
	w, err := finalizerwatch.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return w
}

func TestStartStop(t *testing.T) {
	reg := prometheus.NewRegistry()
	p, err := probe.Start(probe.WithRegisterer(reg), probe.WithWatcher(newWatcher(t)))
	if err != nil {
		t.Fatal(err)
	}
	if p.NeedLeaderElection() {
		t.Error("NeedLeaderElection() = true; every replica must be watched")
	}
	mfs, err := reg.Gather()
	if err != nil || len(mfs) == 0 {
		t.Fatalf("Gather: %d families, %v", len(mfs), err)
	}
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if mfs, _ := reg.Gather(); len(mfs) != 0 {
		t.Fatalf("collector still registered after Stop: %d families", len(mfs))
	}
}

func TestSecondProbeOnSameRegistererIsAnError(t *testing.T) {
	reg := prometheus.NewRegistry()
	p1, err := probe.Start(probe.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	defer p1.Stop()
	p2, err := probe.Start(probe.WithRegisterer(reg))
	if !errors.Is(err, probe.ErrAlreadyRegistered) || p2 != nil {
		t.Fatalf("second Start: %v, %v; want ErrAlreadyRegistered", p2, err)
	}
	p3, err := probe.New(probe.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	if err := p3.Start(context.Background()); !errors.Is(err, probe.ErrAlreadyRegistered) {
		t.Fatalf("(*Probe).Start of a second probe: %v", err)
	}
}

func TestRunnableStopsWithContext(t *testing.T) {
	p, err := probe.New(probe.WithRegisterer(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- p.Start(ctx) }()
	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Start did not return after its context ended")
	}
	if err := p.Start(context.Background()); !errors.Is(err, probe.ErrStopped) {
		t.Fatalf("restarting a stopped probe: %v, want ErrStopped", err)
	}
}

func TestOptionsAreValidated(t *testing.T) {
	tests := []struct {
		name string
		give probe.Option
		want string
	}{
		{"nil option", nil, "probe: New: nil Option"},
		{"nil registerer", probe.WithRegisterer(nil), "probe: WithRegisterer: nil Registerer"},
		{"nil tracer provider", probe.WithTracerProvider(nil), "probe: tracing: WithTracerProvider: nil TracerProvider"},
		{"nil watcher", probe.WithWatcher(nil), "probe: WithWatcher: nil Watcher"},
		{"interval", probe.WithInterval(0), "probe: memstats: WithInterval: interval must be > 0, got 0s"},
		{"top-k zero", probe.WithTopK(0), "probe: promexporter: WithTopK: must be >= 1, got 0"},
		{"nil sampler option", probe.WithSamplerOptions(nil), "probe: memstats: New: nil Option"},
		{"empty listen address", probe.WithListenAddr(""), "probe: WithListenAddr: empty address"},
		{"nil logger", probe.WithLogger(nil), "probe: WithLogger: nil Logger"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for name, start := range map[string]func() (*probe.Probe, error){
				"New":   func() (*probe.Probe, error) { return probe.New(tt.give) },
				"Start": func() (*probe.Probe, error) { return probe.Start(tt.give) },
			} {
				p, err := start()
				if err == nil || err.Error() != tt.want || p != nil {
					t.Errorf("%s: %v, %v; want error %q", name, p, err, tt.want)
				}
			}
		})
	}
}

func TestListenerServesOnlyItsPaths(t *testing.T) {
	p, err := probe.Start(probe.WithRegisterer(prometheus.NewRegistry()), probe.WithListenAddr("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	base := "http://" + p.Addr().String()
	tests := []struct {
		method, path string
		want         int
	}{
		{"GET", "/metrics", 200},
		{"HEAD", "/metrics", 200},
		{"GET", "/debug/pprof/finalizers", 200},
		{"POST", "/metrics", 405},
		{"DELETE", "/debug/pprof/finalizers", 405},
		{"GET", "/", 404},
		{"GET", "/debug/pprof/", 404},
		{"GET", "/metrics/x", 404},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest(tt.method, base+tt.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("%s %s: %d, want %d", tt.method, tt.path, resp.StatusCode, tt.want)
		}
		if tt.path == "/metrics" && tt.method == "GET" && !strings.Contains(string(body), "gcprobe_gc_pause_seconds") {
			t.Errorf("/metrics lacks gcprobe_gc_pause_seconds:\n%.500s", body)
		}
	}
	http.DefaultClient.CloseIdleConnections()
}

// TestOwnMetrics: /metrics serves the whole registry the probe registered
// on, the program's series with gcprobe's, unless WithOwnMetrics.
func TestOwnMetrics(t *testing.T) {
	for _, own := range []bool{false, true} {
		reg := prometheus.NewRegistry()
		host := prometheus.NewCounter(prometheus.CounterOpts{Name: "host_requests_total", Help: "the program's own"})
		reg.MustRegister(host)
		opts := []probe.Option{probe.WithRegisterer(reg)}
		if own {
			opts = append(opts, probe.WithOwnMetrics())
		}
		p, err := probe.Start(opts...)
		if err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		p.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		body := rec.Body.String()
		if !strings.Contains(body, "gcprobe_finalizer_queue_length") {
			t.Errorf("own=%v: /metrics lacks gcprobe's series:\n%.500s", own, body)
		}
		if got := strings.Contains(body, "host_requests_total"); got == own {
			t.Errorf("own=%v: /metrics shows the program's host_requests_total: %v", own, got)
		}
		p.Stop()
	}
}

type leaky struct {
	p   *int
	buf [32]byte
}

var leaked []*leaky

func plant(w *finalizerwatch.Watcher) {
	for range 5 {
		o := &leaky{}
		w.SetFinalizer(o, func(*leaky) {}) // marker: root-leak
		leaked = append(leaked, o)
	}
}

func TestReportNamesPlantedLeak(t *testing.T) {
	w := newWatcher(t)
	p, err := probe.Start(probe.WithRegisterer(prometheus.NewRegistry()), probe.WithWatcher(w), probe.WithSuspectAge(0))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	plant(w)
	t.Cleanup(func() { leaked = nil })
	var r probe.Report
	testkit.AwaitGC(t, 20*time.Second, "a top site with 5 suspects", func() bool {
		r = p.Report()
		return len(r.Top) > 0 && r.Top[0].Suspect == 5
	})
	if !strings.HasSuffix(r.Top[0].Site.Function, "probe_test.plant") {
		t.Fatalf("top site %v", r.Top[0].Site)
	}
	var b strings.Builder
	n, err := r.WriteTo(&b)
	if err != nil || n != int64(b.Len()) || !strings.Contains(b.String(), "probe_test.plant probe_test.go:") {
		t.Fatalf("WriteTo = %d, %v:\n%s", n, err, b.String())
	}
}

// A daemon that embeds the probe must not pay for Kubernetes or gRPC.
func TestRootImportsNoKubernetesOrGRPC(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	for _, pkg := range []string{".", "./finalizerwatch"} {
		out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, banned := range []string{"k8s.io/", "sigs.k8s.io/controller-runtime", "google.golang.org/grpc"} {
				if strings.HasPrefix(dep, banned) {
					t.Errorf("%s depends on %s", pkg, dep)
				}
			}
		}
	}
}

// The probe's leak reports reach the tracer provider it was given.
func TestLeakReportSpanNamesPlantedLeak(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	w := newWatcher(t)
	p, err := probe.Start(probe.WithRegisterer(prometheus.NewRegistry()), probe.WithWatcher(w), probe.WithSuspectAge(0), probe.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	plant(w)
	t.Cleanup(func() { leaked = nil })
	p.ReportNow(context.Background())
	for _, s := range rec.Ended() {
		if s.Name() != "gcprobe.leak_report" {
			continue
		}
		for _, ev := range s.Events() {
			for _, a := range ev.Attributes {
				if a.Key == "code.function.name" && strings.HasSuffix(a.Value.AsString(), "probe_test.plant") {
					return
				}
			}
		}
		t.Fatalf("leak report without the planted site: %+v", s.Events())
	}
	t.Fatal("no gcprobe.leak_report span")
}
