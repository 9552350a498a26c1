package probe_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/gcprobe/probe"
	"github.com/gcprobe/probe/heapprofile"
	"github.com/gcprobe/probe/internal/lifecycle"
	"github.com/gcprobe/probe/internal/lifecycle/lifecycletest"
	"github.com/gcprobe/probe/internal/testkit"
	"github.com/gcprobe/probe/memstats"
	"github.com/gcprobe/probe/tracing"
)

// The goroutines of the runtime that goleak v1.3.0 does not know (see
// TestMain).
var leakOpts = []goleak.Option{
	goleak.IgnoreAnyFunction("runtime.runCleanups"),
	goleak.IgnoreAnyFunction("runtime.runFinalizers"),
}

// subject makes a probe with its own registry, watcher and listener, by
// New (idle) or by the package-level Start (running).
func subject(start bool) func(t *testing.T) lifecycletest.Subject {
	return func(t *testing.T) lifecycletest.Subject {
		opts := []probe.Option{
			probe.WithRegisterer(prometheus.NewRegistry()),
			probe.WithWatcher(newWatcher(t)),
			probe.WithListenAddr("127.0.0.1:0"),
		}
		var (
			p   *probe.Probe
			err error
		)
		if start {
			p, err = probe.Start(opts...)
		} else {
			p, err = probe.New(opts...)
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Stop() })
		return lifecycletest.Subject{Run: p.Start, Stop: p.Stop, State: p.State}
	}
}

// The lifecycle matrix: after New or the package-level Start, every order
// of (*Probe).Start(ctx) (ended or running) and Stop, up to three calls,
// and all of them from many goroutines at once, answer as package
// lifecycle says, and Stop leaves no goroutine behind.
func TestLifecycleMatrix(t *testing.T) {
	for _, tc := range []struct {
		name    string
		start   bool
		initial lifecycle.State
	}{
		{"New", false, lifecycle.Idle},
		{"Start", true, lifecycle.Running},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Run("sequences", func(t *testing.T) {
				lifecycletest.Matrix(t, subject(tc.start), tc.initial, leakOpts...)
			})
			t.Run("concurrent", func(t *testing.T) {
				lifecycletest.Concurrent(t, subject(tc.start), 10, 9, leakOpts...)
			})
		})
	}
}

// The two orders issue 12 reported: New, Stop, Start(ctx) started
// goroutines that nothing could stop; Start, Stop, Start(ctx) answered
// "already started". Both now refuse with ErrStopped, naming the method,
// and start nothing.
func TestStartAfterStopIsErrStopped(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start bool
	}{{"New Stop Start(ctx)", false}, {"Start Stop Start(ctx)", true}} {
		t.Run(tc.name, func(t *testing.T) {
			s := subject(tc.start)(t)
			if err := s.Stop(); err != nil {
				t.Fatal(err)
			}
			errc := make(chan error, 1)
			go func() { errc <- s.Run(context.Background()) }()
			select {
			case err := <-errc:
				if !errors.Is(err, probe.ErrStopped) || !strings.Contains(err.Error(), "probe: Probe.Start") {
					t.Fatalf("Start(ctx) after Stop = %v; want ErrStopped naming probe: Probe.Start", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Start(ctx) after Stop ran: it blocked for 10s")
			}
			goleak.VerifyNone(t, leakOpts...)
		})
	}
}

// A failed start (here: the collector already registered) leaves the
// probe stopped, with nothing running; Stop then returns nil.
func TestFailedStartStops(t *testing.T) {
	reg := prometheus.NewRegistry()
	p1, err := probe.Start(probe.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	defer p1.Stop()
	p2, err := probe.New(probe.WithRegisterer(reg), probe.WithListenAddr("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p2.Start(context.Background()); !errors.Is(err, probe.ErrAlreadyRegistered) {
		t.Fatalf("Start: %v, want ErrAlreadyRegistered", err)
	}
	if p2.State() != lifecycle.Stopped {
		t.Fatalf("state %v after a failed start, want stopped", p2.State())
	}
	if err := p2.Start(context.Background()); !errors.Is(err, probe.ErrStopped) {
		t.Fatalf("second Start: %v, want ErrStopped", err)
	}
	if err := p2.Stop(); err != nil {
		t.Fatal(err)
	}
}

// blockingCollector blocks every Collect until release is closed, and
// counts the calls that entered and that returned.
type blockingCollector struct {
	desc              *prometheus.Desc
	release           chan struct{}
	entered, returned atomic.Int32
}

func newBlockingCollector() *blockingCollector {
	return &blockingCollector{
		desc:    prometheus.NewDesc("test_blocking", "Blocks until released.", nil, nil),
		release: make(chan struct{}),
	}
}

func (c *blockingCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }
func (c *blockingCollector) Collect(ch chan<- prometheus.Metric) {
	c.entered.Add(1)
	defer c.returned.Add(1)
	<-c.release
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, 1)
}

// Stop returns only once the requests the probe's handlers were serving
// have been answered, even on a server that is not the probe's; requests
// waiting for their turn get 503 at once, and so does every request after
// Stop.
func TestStopWaitsForHandlers(t *testing.T) {
	reg := prometheus.NewRegistry()
	slow := newBlockingCollector()
	reg.MustRegister(slow)
	p, err := probe.Start(probe.WithRegisterer(reg), probe.WithWatcher(newWatcher(t)))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/", p.Handler())
	mux.Handle("/profile", p.ProfileHandler())
	srv := httptest.NewServer(mux)
	defer srv.Close()
	client := &http.Client{Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	get := func(path string) (int, error) {
		resp, err := client.Get(srv.URL + path)
		if err != nil {
			return 0, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}

	// Eight scrapes (the most that run at once) block in the collector;
	// a ninth waits for its turn.
	const inFlight = 8
	var wg sync.WaitGroup
	codes := make(chan int, inFlight+1)
	for range inFlight + 1 {
		wg.Go(func() {
			code, err := get("/metrics")
			if err != nil {
				t.Errorf("scrape: %v", err)
			}
			codes <- code
		})
	}
	testkit.Poll(t, 10*time.Second, "eight scrapes in the collector", func() bool { return slow.entered.Load() == inFlight })

	stopped := make(chan error, 1)
	go func() { stopped <- p.Stop() }()
	// The waiting scrape is refused as soon as Stop begins.
	select {
	case code := <-codes:
		if code != http.StatusServiceUnavailable {
			t.Fatalf("the queued scrape got %d, want 503", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the queued scrape was not refused within 10s of Stop")
	}
	if code, err := get("/profile"); err != nil || code != http.StatusServiceUnavailable {
		t.Fatalf("profile during Stop: %d, %v; want 503", code, err)
	}
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned (%v) while %d scrapes were running", err, slow.entered.Load()-slow.returned.Load())
	default:
	}
	close(slow.release)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if n := slow.returned.Load(); n != inFlight {
		t.Fatalf("Stop returned with %d of %d scrapes still collecting", inFlight-n, inFlight)
	}
	wg.Wait()
	close(codes)
	for code := range codes {
		if code != http.StatusOK {
			t.Errorf("an in-flight scrape got %d, want 200", code)
		}
	}
	for _, path := range []string{"/metrics", "/profile"} {
		if code, err := get(path); err != nil || code != http.StatusServiceUnavailable {
			t.Errorf("%s after Stop: %d, %v; want 503", path, code, err)
		}
	}
}

// ErrRunning and ErrStopped are one pair of values under every package's
// names (internal/lifecycle's), so that errors.Is works with whichever a
// caller has at hand. k8sfinalizers, a module of its own, checks its pair
// in its own tests.
func TestLifecycleErrorsAreOneValue(t *testing.T) {
	for name, pair := range map[string][2]error{
		"probe":       {probe.ErrRunning, probe.ErrStopped},
		"memstats":    {memstats.ErrRunning, memstats.ErrStopped},
		"tracing":     {tracing.ErrRunning, tracing.ErrStopped},
		"heapprofile": {heapprofile.ErrRunning, heapprofile.ErrStopped},
	} {
		if pair[0] != lifecycle.ErrRunning || pair[1] != lifecycle.ErrStopped {
			t.Errorf("%s.ErrRunning, %s.ErrStopped are not internal/lifecycle's", name, name)
		}
	}
}
