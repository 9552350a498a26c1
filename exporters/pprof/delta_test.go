package pprofexporter

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/heapprofile"
	"github.com/gcprobe/probe/internal/ledgertest"
	"github.com/gcprobe/probe/internal/testkit"
)

// deltaKept holds the objects of the delta tests' kept registrations.
var deltaKept []*obj

// registerAt registers keep cleanups on objects it keeps and drop on
// objects it drops, all at one line.
//
//go:noinline
func registerAt(w *finalizerwatch.Watcher, keep, drop int) {
	for i := range keep + drop {
		o := new(obj)
		finalizerwatch.AddCleanupTo(w, o, cleanupObj, i) // marker: delta-reg
		if i < keep {
			deltaKept = append(deltaKept, o)
		}
	}
}

// serveDeltaAsync serves a GET of target on h in a goroutine and returns
// the channel its response comes on.
func serveDeltaAsync(ctx context.Context, h http.Handler, target string) <-chan *http.Response {
	done := make(chan *http.Response, 1)
	go func() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, target, nil))
		done <- rec.Result()
	}()
	return done
}

// parseServed parses a 200 response's profile.
func parseServed(t *testing.T, res *http.Response) *profile.Profile {
	t.Helper()
	var body bytes.Buffer
	_, _ = body.ReadFrom(res.Body)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", res.StatusCode, body.String())
	}
	p, err := profile.Parse(&body)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.CheckValid(); err != nil {
		t.Fatal(err)
	}
	return p
}

// samplesAt returns the samples of p whose innermost location is at file:line.
func samplesAt(p *profile.Profile, file string, line int) []*profile.Sample {
	var out []*profile.Sample
	for _, s := range p.Sample {
		for _, ln := range s.Location[0].Line {
			if ln.Function != nil && filepath.Base(ln.Function.Filename) == file && ln.Line == int64(line) {
				out = append(out, s)
				break
			}
		}
	}
	return out
}

func valueOf(t *testing.T, p *profile.Profile, s *profile.Sample, typ string) int64 {
	t.Helper()
	for i, st := range p.SampleType {
		if st.Type == typ {
			return s.Value[i]
		}
	}
	t.Fatalf("no sample type %s in %v", typ, p.SampleType)
	return 0
}

func TestFinalizersDelta(t *testing.T) {
	line := testkit.MarkerLine(t, "delta_test.go", "delta-reg")
	churnLine := testkit.MarkerLine(t, "main_test.go", "churn")
	w, err := finalizerwatch.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	t.Cleanup(func() { deltaKept = nil })
	work := func(keep, drop int) { registerAt(w, keep, drop) } // one line: one stack
	executed := func(n uint64) func() bool {
		return func() bool { return ledgertest.Totals(w, finalizerwatch.KindCleanup).Executed >= n }
	}

	// Before the window: 3 kept and 4 run at the line, and 5 run at
	// another line that does nothing in the window.
	work(3, 4)
	churn(w, 5)
	testkit.AwaitGC(t, 30*time.Second, "the cleanups before the window to run", executed(9))

	h := Handler(w).(*handler)
	began := make(chan struct{})
	h.waiting = func() { close(began) }
	start := time.Now()
	res := serveDeltaAsync(t.Context(), h, "/debug/pprof/finalizers?seconds=2")
	<-began
	// In the window: 5 more kept and 6 more run at the line.
	work(5, 6)
	testkit.AwaitGC(t, 30*time.Second, "the cleanups in the window to run", executed(15))

	p := parseServed(t, <-res)
	if p.DurationNanos != (2 * time.Second).Nanoseconds() {
		t.Errorf("DurationNanos %d, want 2 s", p.DurationNanos)
	}
	if tn := time.Unix(0, p.TimeNanos); tn.Before(start) || tn.After(start.Add(time.Second)) {
		t.Errorf("TimeNanos %v, want the request's start %v", tn, start)
	}
	at := samplesAt(p, "delta_test.go", line)
	if len(at) != 1 {
		t.Fatalf("%d samples at delta_test.go:%d, want 1:\n%v", len(at), line, p)
	}
	s := at[0]
	for _, c := range []struct {
		typ  string
		want int64
	}{
		{SampleRegistered, 11}, // counters: the window's
		{"executed", 6},
		{SampleOutstanding, 8}, // gauge: the end's, before-window kept included
	} {
		if got := valueOf(t, p, s, c.typ); got != c.want {
			t.Errorf("%s = %d at the planted line, want %d", c.typ, got, c.want)
		}
	}
	if got := samplesAt(p, "main_test.go", churnLine); len(got) != 0 {
		t.Errorf("the line that did nothing in the window (all zero) is in the delta: %v", got[0].Value)
	}
	for _, c := range p.Comments {
		if strings.Contains(c, "delta over 2 s") {
			return
		}
	}
	t.Errorf("no comment says the profile is a delta: %q", p.Comments)
}

// TestFinalizersDeltaText serves ?seconds with ?debug=1 and ?sampled=1.
func TestFinalizersDeltaText(t *testing.T) {
	w := plantedWatcher(t)
	rec := httptest.NewRecorder()
	Handler(w).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/?seconds=1&debug=1", nil))
	if rec.Code != http.StatusOK || !strings.HasPrefix(rec.Body.String(), "gcprobe finalizers and cleanups:") ||
		!strings.Contains(rec.Body.String(), "delta over 1 s") {
		t.Fatalf("?seconds=1&debug=1: %d\n%s", rec.Code, rec.Body)
	}
	rec = httptest.NewRecorder()
	Handler(w).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/?seconds=1&sampled=1", nil))
	p := parseServed(t, rec.Result())
	if len(p.SampleType) != len(sampledTypes) || p.DurationNanos != time.Second.Nanoseconds() {
		t.Fatalf("?seconds=1&sampled=1: sample types %v, duration %d", p.SampleType, p.DurationNanos)
	}
}

func TestAllocsDelta(t *testing.T) {
	line := testkit.MarkerLine(t, "allocs_test.go", "alloc-here")
	hp, err := heapprofile.New()
	if err != nil {
		t.Fatal(err)
	}
	publish := func() {
		runtime.GC() // an allocation shows in the runtime's profile two cycles on
		runtime.GC()
		hp.Sample()
	}
	publish()
	allocHere(96 << 20) // before the window
	publish()
	h := AllocsProfilerHandler(hp).(*handler)
	began := make(chan struct{})
	h.waiting = func() { close(began) }
	res := serveDeltaAsync(t.Context(), h, "/debug/pprof/gcprobe-allocs?seconds=1")
	<-began
	allocHere(64 << 20) // in the window
	publish()

	p := parseServed(t, <-res)
	if p.DurationNanos != time.Second.Nanoseconds() {
		t.Errorf("DurationNanos %d, want 1 s", p.DurationNanos)
	}
	at := samplesAt(p, "allocs_test.go", line)
	if len(at) != 1 {
		t.Fatalf("%d samples at allocs_test.go:%d, want 1:\n%v", len(at), line, p)
	}
	// Estimates scaled from the runtime's samples: about 64 MiB, far
	// from the 160 MiB since the profiler's first read. At the default
	// MemProfileRate about 128 of the 8 KiB objects are sampled, a count
	// whose standard deviation is 9 %: the bounds are more than four.
	if got := valueOf(t, p, at[0], SampleAllocSpace); got < 40<<20 || got > 96<<20 {
		t.Errorf("alloc_space %d in the window, want about %d", got, 64<<20)
	}
	if got := valueOf(t, p, at[0], SampleAllocObjects); got < 5<<10 || got > 12<<10 {
		t.Errorf("alloc_objects %d in the window, want about %d", got, 8<<10)
	}
	// inuse_space, a gauge, is the end's: the snapshot's figure.
	var inuse int64 = -1
	for _, s := range hp.Snapshot().Allocating {
		if s.Frame.Line == line {
			inuse = s.InUseBytes
		}
	}
	if got := valueOf(t, p, at[0], SampleInuseSpace); got != inuse {
		t.Errorf("inuse_space %d, want the latest read's %d", got, inuse)
	}
}

func TestDeltaBadSeconds(t *testing.T) {
	w := plantedWatcher(t)
	handlers := map[string]http.Handler{
		"finalizers": Handler(w),
		"allocs":     AllocsProfilerHandler(new(heapprofile.Profiler)),
	}
	srv := httptest.NewUnstartedServer(nil)
	srv.Config.WriteTimeout = 5 * time.Second
	mux := http.NewServeMux()
	for name, h := range handlers {
		mux.Handle("/"+name, h)
	}
	srv.Config.Handler = mux
	srv.Start()
	defer srv.Close()
	tests := []struct {
		give string
		want string // in the message
	}{
		{give: "", want: "from 1 to 4"},
		{give: "x", want: "from 1 to 4"},
		{give: "1.5", want: "from 1 to 4"},
		{give: "0", want: "from 1 to 4"},
		{give: "-3", want: "from 1 to 4"},
		{give: "5", want: "WriteTimeout of 5s"}, // not below the server's WriteTimeout
		{give: "301", want: "from 1 to 4"},
	}
	for name := range handlers {
		for _, tt := range tests {
			res, err := http.Get(srv.URL + "/" + name + "?seconds=" + tt.give)
			if err != nil {
				t.Fatal(err)
			}
			var body bytes.Buffer
			_, _ = body.ReadFrom(res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusBadRequest || !strings.Contains(body.String(), "seconds=") || !strings.Contains(body.String(), tt.want) {
				t.Errorf("%s ?seconds=%s: %d %q, want 400 naming seconds and %q", name, tt.give, res.StatusCode, body.String(), tt.want)
			}
		}
	}
	// Without a server's WriteTimeout, the limit is MaxDeltaSeconds.
	rec := httptest.NewRecorder()
	Handler(w).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/?seconds=301", nil))
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "from 1 to 300 (MaxDeltaSeconds)") {
		t.Errorf("?seconds=301: %d %q", rec.Code, rec.Body)
	}
	// A snapshot-only handler has no delta to take.
	rec = httptest.NewRecorder()
	AllocsHandler(func() heapprofile.Snapshot { return heapprofile.Snapshot{} }).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/?seconds=1", nil))
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "seconds is not supported") {
		t.Errorf("AllocsHandler ?seconds=1: %d %q", rec.Code, rec.Body)
	}
}

func TestDeltaConcurrencyLimit(t *testing.T) {
	w := plantedWatcher(t)
	h := Handler(w).(*handler)
	var began sync.WaitGroup
	began.Add(MaxConcurrentDeltas)
	h.waiting = began.Done
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var waiting []<-chan *http.Response
	for range MaxConcurrentDeltas {
		waiting = append(waiting, serveDeltaAsync(ctx, h, "/?seconds=60"))
	}
	began.Wait() // every delta slot waits
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/?seconds=1", nil))
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" ||
		!strings.Contains(rec.Body.String(), "at most 4 at once") {
		t.Errorf("delta beyond %d: %d %q, Retry-After %q", MaxConcurrentDeltas, rec.Code, rec.Body, rec.Header().Get("Retry-After"))
	}
	// The cumulative profile is not held up by the waiting deltas.
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if rec.Code != http.StatusOK {
		t.Errorf("cumulative profile while deltas wait: %d", rec.Code)
	}
	cancel()
	deadline := time.After(5 * time.Second)
	for _, res := range waiting {
		select {
		case r := <-res:
			if r.StatusCode != http.StatusServiceUnavailable {
				t.Errorf("a cancelled delta answered %d, want 503", r.StatusCode)
			}
		case <-deadline:
			t.Fatal("a cancelled delta still waits")
		}
	}
	// The slots are free again.
	h.waiting = nil
	res := serveDeltaAsync(t.Context(), h, "/?seconds=1")
	if r := <-res; r.StatusCode != http.StatusOK {
		t.Errorf("after the cancelled deltas: %d, want 200", r.StatusCode)
	}
}

// TestDeltaClientGoesAway closes a real client's request while the delta
// waits: the handler returns at once (goleak, in TestMain, checks that
// nothing is left).
func TestDeltaClientGoesAway(t *testing.T) {
	w := plantedWatcher(t)
	h := Handler(w).(*handler)
	began := make(chan struct{})
	h.waiting = func() { close(began) }
	returned := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		defer close(returned)
		h.ServeHTTP(rw, r)
	}))
	defer srv.Close()
	ctx, cancel := context.WithCancel(t.Context())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/?seconds=120", nil)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		res, err := http.DefaultClient.Do(req)
		if err == nil {
			res.Body.Close()
		}
		errc <- err
	}()
	<-began
	at := time.Now()
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("the cancelled request succeeded")
	}
	select {
	case <-returned:
		if d := time.Since(at); d > 2*time.Second {
			t.Errorf("the handler returned %v after the client went away", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler still waits 10 s after the client went away")
	}
	http.DefaultClient.CloseIdleConnections()
}
