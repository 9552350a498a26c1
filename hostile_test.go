package probe_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gcprobe/probe"
	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/internal/ledgertest"
	"github.com/gcprobe/probe/internal/testkit"
)

// countingHandler counts the log records it receives.
type countingHandler struct {
	n    atomic.Int64
	last atomic.Value
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	h.n.Add(1)
	h.last.Store(r.Message)
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }

// A panic in one of the probe's goroutines is recovered, counted in a
// self-metric and logged once.
func TestPanicsInsideTheProbeAreRecovered(t *testing.T) {
	logs := &countingHandler{}
	p, err := probe.Start(probe.WithRegisterer(prometheus.NewRegistry()), probe.WithLogger(slog.New(logs)))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		p.GoSafe("test", func() { panic("boom") })
	}
	// Stop waits for every goroutine the probe started, recoveries
	// included.
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	if got := p.Panics(); got != 3 {
		t.Fatalf("Panics() = %d, want 3", got)
	}
	if n := logs.n.Load(); n != 1 {
		t.Fatalf("logged %d times, want once", n)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(p.Collector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		if mf.GetName() == "gcprobe_probe_panics_total" {
			found = mf.GetMetric()[0].GetCounter().GetValue() == 3
		}
	}
	if !found {
		t.Fatal("gcprobe_probe_panics_total is not 3")
	}
}

// loadDuration is how long the load test runs: 30 s, or 3 s with -short.
// silentGrace is the least time a client that has connected and sent
// nothing keeps its place in a full listener whose accept queue is not
// empty: the kernel's TCP_DEFER_ACCEPT second on Linux (the listener
// gets the connection only then), the pressed grace elsewhere.
var silentGrace = func() time.Duration {
	if runtime.GOOS == "linux" {
		return time.Second
	}
	return 50 * time.Millisecond
}()

func loadDuration() time.Duration {
	if testing.Short() {
		return 3 * time.Second
	}
	return 30 * time.Second
}

// 100 concurrent scrapers of /metrics and the profile, with registrations
// from 32 goroutines: every answer is 200, or 503 from the documented
// bounds on concurrent scrapes; goroutines do not grow; memory stays
// bounded. (goleak in TestMain checks that Stop ended everything.)
func TestLoadScrapersAndRegistrations(t *testing.T) {
	w := newWatcher(t)
	p, err := probe.Start(probe.WithRegisterer(prometheus.NewRegistry()), probe.WithWatcher(w), probe.WithListenAddr("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	base := "http://" + p.Addr().String()
	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 100}}
	defer client.CloseIdleConnections()

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	goroutinesBefore := runtime.NumGoroutine()

	ctx, cancel := context.WithTimeout(context.Background(), loadDuration())
	defer cancel()
	var wg sync.WaitGroup
	var ok, busy, failed, spare, silent atomic.Int64
	var firstErr atomic.Value
	for i := range 100 {
		path := "/metrics"
		if i%4 == 0 {
			path = "/debug/pprof/finalizers"
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				var conn httptrace.GotConnInfo
				// Set on the transport's dialling and writing
				// goroutines: Unix nanoseconds, 0 until then.
				var dialed, wrote atomic.Int64
				req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
					GotConn:      func(info httptrace.GotConnInfo) { conn = info },
					ConnectStart: func(string, string) { dialed.Store(time.Now().UnixNano()) },
					WroteRequest: func(httptrace.WroteRequestInfo) { wrote.Store(time.Now().UnixNano()) },
				}), http.MethodGet, base+path, nil)
				resp, err := client.Do(req)
				if err != nil {
					switch {
					case ctx.Err() != nil:
					case conn.WasIdle && !conn.Reused && errors.Is(err, io.EOF):
						// A connection the client's transport dialled
						// for a request that another connection served,
						// and left unused in its idle pool: silent, so
						// the full listener evicted it (see
						// MaxListenerConns), and net/http does not
						// retry a request on a connection never used.
						spare.Add(1)
					case !conn.Reused && !conn.WasIdle && dialed.Load() != 0 && wrote.Load() != 0 &&
						time.Duration(wrote.Load()-dialed.Load()) >= silentGrace && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)):
						// A connection this request dialled and then,
						// starved of the CPU by the registering
						// goroutines, left silent for longer than the
						// full listener lets a silent client hold a
						// place (on Linux the kernel's TCP_DEFER_ACCEPT
						// second, which only then hands the listener
						// the connection): evicted as the attack tests
						// want a silent client evicted. A scraper in
						// its own process sends its request at once.
						silent.Add(1)
					default:
						failed.Add(1)
						firstErr.CompareAndSwap(nil, fmt.Sprintf("%v (connection reused %t, was idle %t for %v; dialled %v before its request was written)",
							err, conn.Reused, conn.WasIdle, conn.IdleTime, time.Duration(wrote.Load()-dialed.Load())))
					}
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				switch resp.StatusCode {
				case 200:
					ok.Add(1)
				case 503:
					busy.Add(1)
				default:
					failed.Add(1)
					firstErr.CompareAndSwap(nil, resp.Status)
				}
			}
		}()
	}
	var registered atomic.Int64
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				o := &leaky{}
				w.SetFinalizer(o, func(*leaky) {})
				c := finalizerwatch.AddCleanupTo(w, o, func(int) {}, 0)
				registered.Add(2)
				// Most registrations are cleared, as a closed file's
				// finalizer is; the rest are dropped and run. Unpaced,
				// 32 goroutines outrun the one finalizer goroutine and
				// the queue, not the probe, would fill the heap.
				if i%16 != 0 {
					w.SetFinalizer(o, nil)
					c.Stop()
				}
			}
		}()
	}
	wg.Wait()
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	t.Logf("%v: %d scrapes ok, %d refused (503), %d failed, %d on a spare connection evicted, %d on a connection left silent evicted; %d registrations; heap in use %d → %d KiB; goroutines %d → %d",
		loadDuration(), ok.Load(), busy.Load(), failed.Load(), spare.Load(), silent.Load(), registered.Load(),
		before.HeapInuse/1024, after.HeapInuse/1024, goroutinesBefore, runtime.NumGoroutine())
	if failed.Load() > 0 {
		t.Fatalf("%d scrapes failed; first: %v", failed.Load(), firstErr.Load())
	}
	// Spare connections are evicted only when the listener is full and
	// the client leaves them silent: rare, or the listener evicts more
	// than it should.
	if n := spare.Load() + silent.Load(); n > 0 && n*100 > ok.Load() {
		t.Fatalf("%d requests failed on a spare or silent connection evicted, more than 1%% of %d answered", n, ok.Load())
	}
	// Once the dropped registrations have run, the heap is back near
	// where it started: nothing the probe keeps grows with the load.
	testkit.AwaitGC(t, 30*time.Second, "at most 1000 registrations outstanding after the load", func() bool {
		return ledgertest.Totals(w, finalizerwatch.KindFinalizer).Outstanding+ledgertest.Totals(w, finalizerwatch.KindCleanup).Outstanding <= 1000
	})
	runtime.GC()
	runtime.ReadMemStats(&after)
	t.Logf("after the drain: heap in use %d KiB", after.HeapInuse/1024)
	if grown := int64(after.HeapInuse) - int64(before.HeapInuse); grown > 64<<20 {
		t.Fatalf("heap in use grew by %d MiB under load", grown>>20)
	}
	if ok.Load() == 0 {
		t.Fatal("no scrape succeeded")
	}
	client.CloseIdleConnections()
	// Idle keep-alive connections close asynchronously: poll.
	testkit.Poll(t, 10*time.Second, fmt.Sprintf("the goroutines to fall back to at most %d+5", goroutinesBefore), func() bool {
		return runtime.NumGoroutine() <= goroutinesBefore+5
	})
}

// The sampler at a 1 ms interval, a Stop in the middle of scrapes: the
// host keeps working and nothing leaks.
func TestFaults(t *testing.T) {
	t.Run("sampler at 1ms", func(t *testing.T) {
		w := newWatcher(t)
		p, err := probe.Start(probe.WithRegisterer(prometheus.NewRegistry()), probe.WithWatcher(w), probe.WithInterval(time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		start := p.Sampler().Snapshot().Samples
		testkit.Poll(t, 10*time.Second, "200 samples at a 1ms interval", func() bool {
			if p.Sampler().Snapshot().Samples >= start+200 {
				return true
			}
			w.SetFinalizer(&leaky{}, func(*leaky) {}) // a registration a check: the sampler has work while it runs
			return false
		})
		if err := p.Stop(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("stop during scrapes", func(t *testing.T) {
		p, err := probe.Start(probe.WithRegisterer(prometheus.NewRegistry()), probe.WithListenAddr("127.0.0.1:0"))
		if err != nil {
			t.Fatal(err)
		}
		base := "http://" + p.Addr().String()
		client := &http.Client{Timeout: 10 * time.Second}
		var wg sync.WaitGroup
		var answered atomic.Int64
		stop := make(chan struct{})
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					if resp, err := client.Get(base + "/metrics"); err == nil {
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						answered.Add(1)
					}
				}
			}()
		}
		// Scrapes under way, so that the Stop lands among them.
		testkit.Poll(t, 10*time.Second, "8 scrapes answered", func() bool { return answered.Load() >= 8 })
		if err := p.Stop(); err != nil && !strings.Contains(err.Error(), "listener") {
			t.Fatal(err)
		}
		close(stop)
		wg.Wait()
		client.CloseIdleConnections()
	})
}

// A zero-value Probe (not made by New or Start) has nothing to run: each
// method answers with an error naming itself, and none panics into the
// host (issue 26, item 13).
func TestZeroValueProbeIsAnErrorNotAPanic(t *testing.T) {
	logs := &countingHandler{}
	prev := slog.Default()
	slog.SetDefault(slog.New(logs))
	t.Cleanup(func() { slog.SetDefault(prev) })

	for _, tt := range []struct {
		name string
		give *probe.Probe
	}{
		{name: "zero", give: &probe.Probe{}},
		{name: "nil", give: nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.give
			wantErr := func(fn string, err error) {
				t.Helper()
				if err == nil || !strings.Contains(err.Error(), "(*Probe)."+fn) || !strings.Contains(err.Error(), "zero-value") {
					t.Errorf("%s: got error %v, want one naming (*Probe).%s and the zero value", fn, err, fn)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			wantErr("Start", p.Start(ctx))
			wantErr("Stop", p.Stop())
			for fn, h := range map[string]http.Handler{"ProfileHandler": p.ProfileHandler(), "Handler": p.Handler(), "PageHandler": p.PageHandler()} {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
				if rec.Code != http.StatusInternalServerError || !strings.Contains(rec.Body.String(), "(*Probe)."+fn) {
					t.Errorf("%s on a %s Probe answered %d %q, want 500 naming (*Probe).%s", fn, tt.name, rec.Code, rec.Body.String(), fn)
				}
			}
			before := logs.n.Load()
			if r := p.Report(); len(r.Top) != 0 || r.Time.IsZero() {
				t.Errorf("Report on a %s Probe = %+v, want an empty report", tt.name, r)
			}
			if logs.n.Load() != before+1 || !strings.Contains(logs.last.Load().(string), "(*Probe).Report") {
				t.Errorf("Report on a %s Probe logged %d records, last %q; want one naming (*Probe).Report", tt.name, logs.n.Load()-before, logs.last.Load())
			}
			p.ReportNow(ctx)
			if !strings.Contains(logs.last.Load().(string), "(*Probe).ReportNow") {
				t.Errorf("ReportNow on a %s Probe logged %q, want a record naming (*Probe).ReportNow", tt.name, logs.last.Load())
			}
		})
	}
}
