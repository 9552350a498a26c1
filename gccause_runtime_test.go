//go:build gcprobe_runtime

package probe_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gcprobe/probe"
	"github.com/gcprobe/probe/heapprofile"
	"github.com/gcprobe/probe/internal/testkit"
	"github.com/gcprobe/probe/memstats"
)

// forceLoop calls runtime.GC at one line every pace, until stop, noting
// when each call returned: a program that forces collections.
func forceLoop(stop <-chan struct{}, pace time.Duration, calls *callTimes) {
	t := time.NewTicker(pace)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		runtime.GC() // marker: force-line
		calls.note(time.Now())
	}
}

// callTimes are the times the loop's calls returned.
type callTimes struct {
	mu sync.Mutex
	at []time.Time
}

func (c *callTimes) note(t time.Time) {
	c.mu.Lock()
	c.at = append(c.at, t)
	c.mu.Unlock()
}

// within returns how many calls returned in (t-d, t].
func (c *callTimes) within(t time.Time, d time.Duration) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, a := range c.at {
		if a.After(t.Add(-d)) && !a.After(t) {
			n++
		}
	}
	return n
}

// TestRuntimeModeForcedGCCause: in the runtime build mode, a runtime.GC loop
// is the forced_gc cause, named at the line that calls it, with its rate
// over the default one-minute window within 10% of the calls made, and
// not called allocation-driven. (Rounds come at every cycle: the rate
// once stopped at 256 a minute.)
func TestRuntimeModeForcedGCCause(t *testing.T) {
	p, err := probe.Start(probe.WithRegisterer(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	stop := make(chan struct{})
	done := make(chan struct{})
	var calls callTimes
	go func() { defer close(done); forceLoop(stop, 50*time.Millisecond, &calls) }() // 1 200 a minute at most
	defer func() { close(stop); <-done }()

	start := time.Now()
	var rep probe.Report
	testkit.Poll(t, 3*time.Minute, "a forced_gc cause with its calling line, over a whole window", func() bool {
		rep = p.Report()
		for _, c := range rep.GCCause.Causes {
			if c.Event.Detector == memstats.DetectorForcedGC && len(c.Callers) > 0 && time.Since(start) > 65*time.Second {
				return true
			}
		}
		return false
	})
	text := rep.String()
	t.Logf("report:\n%s", text)
	want := fmt.Sprintf("called at github.com/gcprobe/probe_test.forceLoop gccause_runtime_test.go:%d:", testkit.MarkerLine(t, "gccause_runtime_test.go", "force-line"))
	if !strings.Contains(text, want) {
		t.Errorf("the report does not name the runtime.GC line %q", want)
	}
	// The rate the cause reports against the calls the loop made over
	// the minute before the round that read it.
	var c probe.Cause
	for _, k := range rep.GCCause.Causes {
		if k.Event.Detector == memstats.DetectorForcedGC {
			c = k
		}
	}
	made := float64(calls.within(rep.GC.Time, time.Minute))
	if v := c.Event.Value; v < made*0.9 || v > made*1.1 {
		t.Errorf("forced_gc's rate %.0f a minute, the loop made %.0f calls in the minute: more than 10%% apart", v, made)
	}
	for _, k := range rep.GCCause.Causes {
		if k.Event.Detector == memstats.DetectorAllocationDriven {
			t.Errorf("a runtime.GC loop is called allocation-driven: %s", k.Words)
		}
	}
}

// TestRuntimeModeHeapSiteAtGoroutineOrigin: the allocations net/http makes
// on its connection goroutines (reading each request's header) have no
// frame of the program's on their own stacks; in the runtime build mode
// the heap profile names them at the program's line that caused those
// goroutines, the server's start, with the path down to the allocation,
// rather than at a standard-library frame.
func TestRuntimeModeHeapSiteAtGoroutineOrigin(t *testing.T) {
	defer func(r int) { runtime.MemProfileRate = r }(runtime.MemProfileRate)
	runtime.MemProfileRate = 4 << 10
	p, err := probe.Start(probe.WithRegisterer(prometheus.NewRegistry()),
		probe.WithHeapProfileOptions(heapprofile.WithInterval(250*time.Millisecond), heapprofile.WithTopK(50)))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})) // marker: server-start
	defer srv.Close()
	line := testkit.MarkerLine(t, "gccause_runtime_test.go", "server-start")
	want := fmt.Sprintf("gccause_runtime_test.go:%d", line)
	req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 32 {
		req.Header.Set(fmt.Sprintf("X-Filler-%d", i), strings.Repeat("x", 256))
	}
	var found heapprofile.Site
	testkit.Poll(t, 60*time.Second, "a heap site at the server's start line", func() bool {
		for range 200 {
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
		for _, s := range p.HeapProfile().Snapshot().Allocating {
			// The server's start allocates itself too (httptest.NewServer's
			// listener): the site wanted is the line through the
			// connection goroutine's serve.
			if s.Frame.Line == line && strings.HasSuffix(s.Frame.File, "gccause_runtime_test.go") && strings.Contains(s.PathString(), "net/http.(*conn).serve") {
				found = s
				return true
			}
		}
		return false
	})
	t.Logf("site %s, path %s", found.Label(), found.PathString())
	if ps := found.PathString(); !strings.HasPrefix(ps, want) {
		t.Errorf("path %q: want it from %s", ps, want)
	}
}
