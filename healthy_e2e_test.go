package probe_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gcprobe/probe"
	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/internal/testkit"
)

// serverObj is what the healthy server's sites register: a file, a
// connection, a pooled buffer.
type serverObj struct{ _ [64]byte }

// healthyServer is a busy server's life, in real time: enough garbage for
// tens of GC cycles a second (with the test's GOGC of 10), a pool that warms up over its first ten
// seconds and is kept, fifty files opened at start-up and kept, churn
// (objects registered and dropped, their finalizers run), and two planted
// leaks: five objects a second, and one every two seconds, kept forever.
type healthyServer struct {
	w    *finalizerwatch.Watcher
	mu   sync.Mutex
	kept []*serverObj
	sink atomic.Pointer[[]byte]
}

func (s *healthyServer) register(site string) {
	o := &serverObj{}
	switch site {
	case "pool":
		s.w.SetFinalizer(o, func(*serverObj) {}) // marker: h-pool
	case "startup":
		s.w.SetFinalizer(o, func(*serverObj) {}) // marker: h-startup
	case "churn":
		s.w.SetFinalizer(o, func(*serverObj) {}) // marker: h-churn
		return
	case "leak5":
		s.w.SetFinalizer(o, func(*serverObj) {}) // marker: h-leak5
	case "leakslow":
		s.w.SetFinalizer(o, func(*serverObj) {}) // marker: h-leakslow
	}
	s.mu.Lock()
	s.kept = append(s.kept, o)
	s.mu.Unlock()
}

// run runs the server until stop is closed.
func (s *healthyServer) run(stop <-chan struct{}) {
	for range 50 {
		s.register("startup")
	}
	start := time.Now()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	var n int
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		n++
		b := make([]byte, 48<<10) // garbage: with GOGC=10, the GC runs tens of times a second
		s.sink.Store(&b)
		if n%10 == 0 {
			s.register("churn")
		}
		if n%200 == 0 {
			s.register("leak5") // about 5 a second
		}
		if n%2000 == 0 {
			s.register("leakslow") // about one every 2 s
		}
		if n%50 == 0 && time.Since(start) < 10*time.Second {
			s.register("pool") // about 20 a second for 10 s
		}
	}
}

// TestHealthyServerNoFalseAlarms runs a busy server for 90 s of real time
// under a probe with its default suspect age: the pool warming up, the
// start-up files and the churn log no growing line, ever; the two planted
// leaks are logged, each at its line, within 90 s, and are growing on
// /metrics as on the page at the end.
func TestHealthyServerNoFalseAlarms(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 90 s of real time")
	}
	lines := map[string]int{}
	for _, s := range []string{"pool", "startup", "churn", "leak5", "leakslow"} {
		lines[s] = testkit.MarkerLine(t, "healthy_e2e_test.go", "h-"+s)
	}
	// A small heap goal makes the GC run tens of times a second on a few
	// MB of garbage a second, not a core's worth of allocation: the test
	// shares the machine with other packages' tests.
	defer debug.SetGCPercent(debug.SetGCPercent(10))
	var logs testkit.SyncBuffer
	reg := prometheus.NewRegistry()
	srv := &healthyServer{w: newWatcher(t)}
	p, err := probe.Start(probe.WithRegisterer(reg), probe.WithWatcher(srv.w), probe.WithListenAddr("127.0.0.1:0"),
		probe.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	defer noRedirect.CloseIdleConnections()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); srv.run(stop) }()
	defer func() { close(stop); <-done }()

	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	gc0, t0 := ms.NumGC, time.Now()
	growingLine := func(site string) bool {
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "site growing") && strings.Contains(l, fmt.Sprintf("healthy_e2e_test.go:%d", lines[site])) {
				return true
			}
		}
		return false
	}
	seen := map[string]time.Duration{}
	for time.Since(t0) < 90*time.Second || len(seen) < 2 {
		if time.Since(t0) > 100*time.Second {
			break
		}
		for _, site := range []string{"pool", "startup", "churn"} {
			if growingLine(site) {
				t.Fatalf("at %v: a false alarm for the %s site:\n%s", time.Since(t0).Round(time.Second), site, logs.String())
			}
		}
		for _, site := range []string{"leak5", "leakslow"} {
			if _, ok := seen[site]; !ok && growingLine(site) {
				seen[site] = time.Since(t0).Round(time.Second)
			}
		}
		time.Sleep(500 * time.Millisecond) // real time is what the test is about: it watches, it does not wait for a condition
	}
	runtime.ReadMemStats(&ms)
	rate := float64(ms.NumGC-gc0) / time.Since(t0).Seconds()
	t.Logf("%.0f GC cycles a second; leaks logged growing at %v", rate, seen)
	if rate < 30 {
		t.Logf("warning: only %.0f GC cycles a second (a loaded machine); the test wants 30", rate)
	}
	for _, site := range []string{"leak5", "leakslow"} {
		if d, ok := seen[site]; !ok || d > 90*time.Second {
			t.Errorf("the %s leak was not logged growing within 90 s (at %v):\n%s", site, d, logs.String())
		}
	}
	if n := strings.Count(logs.String(), "site growing"); n != 2 {
		t.Errorf("%d growing lines, want 2 (one per leak):\n%s", n, logs.String())
	}

	// The page and /metrics say the same.
	code, _, body := getPage(t, noRedirect, "GET", "http://"+p.Addr().String()+probe.PagePath+probe.PageDataPath)
	var d probe.PageData
	if err := json.NewDecoder(bytes.NewReader(body)).Decode(&d); code != 200 || err != nil {
		t.Fatalf("data.json: %d %v", code, err)
	}
	pageGrowing := map[int]bool{}
	for _, s := range d.Sites {
		pageGrowing[s.Line] = s.Class == "growing"
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	metricGrowing := map[int]bool{}
	for _, mf := range mfs {
		if mf.GetName() != "gcprobe_finalizers_growing" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				for site, line := range lines {
					if lp.GetName() == "site" && strings.HasSuffix(lp.GetValue(), fmt.Sprintf("healthy_e2e_test.go:%d", line)) {
						metricGrowing[lines[site]] = m.GetGauge().GetValue() == 1
					}
				}
			}
		}
	}
	for site, line := range lines {
		want := strings.HasPrefix(site, "leak")
		if pageGrowing[line] != want || metricGrowing[line] != want {
			t.Errorf("%s (line %d): growing on the page %v, on /metrics %v; want %v", site, line, pageGrowing[line], metricGrowing[line], want)
		}
	}
	srv.mu.Lock()
	srv.kept = nil
	srv.mu.Unlock()
}
