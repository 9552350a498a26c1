package finalizerwatch

import (
	"math"
	"runtime"
	"testing"
	"time"

	"github.com/gcprobe/probe/internal/testkit"
)

// registerVia registers a finalizer on o from one line, reached through
// path A or path B, so that the two stacks differ below the site.
//
//go:noinline
func registerVia(w *Watcher, o *thing) {
	w.SetFinalizer(o, func(*thing) {}) // marker: sampled-site
}

//go:noinline
func pathA(w *Watcher, o *thing) { registerVia(w, o) } // marker: path-a

//go:noinline
func pathB(w *Watcher, o *thing) { registerVia(w, o) } // marker: path-b

//go:noinline
func cleanupVia(w *Watcher, o *thing) Cleanup {
	return AddCleanupTo(w, o, func(int) {}, 1) // marker: sampled-cleanup
}

// samplesByCaller indexes the sampled stacks of kind k by the line of the
// frame below their site.
func samplesByCaller(t *testing.T, w *Watcher, k Kind) map[int]StackSample {
	t.Helper()
	out := map[int]StackSample{}
	for _, s := range w.stackSamples(k) {
		if len(s.Stack) < 2 {
			t.Fatalf("sampled stack too short: %+v", s.Stack)
		}
		out[s.Stack[1].Line] = s
	}
	return out
}

// TestStackSamplesEveryRegistration samples every registration (rate 1):
// the sampled stacks then count exactly, each path into a site apart, and
// the site's own counts are the same as without sampling.
func TestStackSamplesEveryRegistration(t *testing.T) {
	w := newWatcher(t, WithStackSampleRate(1))
	site := testkit.MarkerLine(t, "sample_test.go", "sampled-site")
	lineA := testkit.MarkerLine(t, "sample_test.go", "path-a")
	lineB := testkit.MarkerLine(t, "sample_test.go", "path-b")

	var keep []*thing
	for i := range 30 {
		o := &thing{}
		if i%3 == 0 {
			pathA(w, o)
		} else {
			pathB(w, o)
		}
		keep = append(keep, o)
	}
	for _, o := range keep[:6] { // 2 through A, 4 through B
		w.SetFinalizer(o, nil)
	}
	got := samplesByCaller(t, w, KindFinalizer)
	for line, want := range map[int][3]uint64{lineA: {10, 2, 8}, lineB: {20, 4, 16}} {
		s, ok := got[line]
		if !ok {
			t.Fatalf("no sampled stack through line %d; have %v", line, got)
		}
		if s.Site.Line != site || s.Rate != 1 || s.Registered != want[0] || s.Cleared != want[1] || s.Outstanding != want[2] || s.Executed != 0 {
			t.Errorf("stack through line %d: site line %d, rate %d, registered/cleared/outstanding %d/%d/%d, executed %d; want site line %d, rate 1, %v",
				line, s.Site.Line, s.Rate, s.Registered, s.Cleared, s.Outstanding, s.Executed, site, want)
		}
	}
	st, ok := siteByLine(w.siteList(), site)
	if !ok || st.Registered != 30 || st.Cleared != 6 || st.Outstanding != 24 {
		t.Fatalf("site: %+v (found %v), want 30 registered, 6 cleared, 24 outstanding", st, ok)
	}

	// Dropped, the objects' finalizers run and count under their stacks.
	keep = nil
	testkit.AwaitGC(t, 20*time.Second, "sampled finalizers to run", func() bool {
		var ex uint64
		for _, s := range w.stackSamples(KindFinalizer) {
			ex += s.Executed
		}
		return ex == 24
	})
	for _, s := range w.stackSamples(KindFinalizer) {
		if s.Outstanding != 0 {
			t.Errorf("stack through line %d: %d outstanding after every finalizer ran", s.Stack[1].Line, s.Outstanding)
		}
	}
}

// TestStackSamplesCleanups samples every cleanup registration: a stopped
// one counts cleared under its stack, one that ran counts executed.
func TestStackSamplesCleanups(t *testing.T) {
	w := newWatcher(t, WithStackSampleRate(1))
	site := testkit.MarkerLine(t, "sample_test.go", "sampled-cleanup")
	kept := &thing{}
	cleanupVia(w, kept).Stop() // marker: stopped-cleanup
	cleanupVia(w, &thing{})    // marker: dropped-cleanup
	stopped := testkit.MarkerLine(t, "sample_test.go", "stopped-cleanup")
	dropped := testkit.MarkerLine(t, "sample_test.go", "dropped-cleanup")
	testkit.AwaitGC(t, 20*time.Second, "the sampled cleanup to run", func() bool {
		return samplesByCaller(t, w, KindCleanup)[dropped].Executed == 1
	})
	// A Stop counts cleared once it is known not to run.
	testkit.AwaitGC(t, 20*time.Second, "the Stops settled", func() bool { return settleStops(false) == 0 })
	got := samplesByCaller(t, w, KindCleanup)
	if s := got[stopped]; s.Site.Line != site || s.Registered != 1 || s.Cleared != 1 || s.Executed != 0 || s.Outstanding != 0 {
		t.Errorf("stopped cleanup's stack %+v, want site line %d with 1 registered and cleared", s, site)
	}
	if s := got[dropped]; s.Site.Line != site || s.Registered != 1 || s.Cleared != 0 || s.Executed != 1 || s.Outstanding != 0 {
		t.Errorf("dropped cleanup's stack %+v, want site line %d with 1 registered and executed", s, site)
	}
	runtime.KeepAlive(kept)
}

// TestStackSamplesRate checks that sampling at rate r samples about one
// registration in r, and that the scaled counts estimate the site's.
func TestStackSamplesRate(t *testing.T) {
	const rate, n = 16, 16000
	w := newWatcher(t, WithStackSampleRate(rate))
	o := &thing{}
	for range n {
		pathA(w, o)
		w.SetFinalizer(o, nil)
	}
	var sampled, est uint64
	for _, s := range w.stackSamples(KindFinalizer) {
		sampled += s.Sampled
		est += s.Registered
	}
	// Binomial(n, 1/rate): mean 1000, standard deviation about 31. Six
	// deviations either way fail about once in a billion runs.
	mean := float64(n) / rate
	sd := math.Sqrt(mean * (1 - 1.0/rate))
	if math.Abs(float64(sampled)-mean) > 6*sd {
		t.Fatalf("%d of %d registrations sampled at rate %d, want %.0f ± %.0f", sampled, n, rate, mean, 6*sd)
	}
	if est != sampled*rate {
		t.Fatalf("estimated %d registrations from %d samples at rate %d", est, sampled, rate)
	}
}

// TestStackSamplesOff checks rate 0 and full stacks: nothing is sampled.
func TestStackSamplesOff(t *testing.T) {
	for _, opts := range [][]Option{{WithStackSampleRate(0)}, {WithStackSampleRate(1), WithFullStacks(true)}} {
		w := newWatcher(t, opts...)
		o := &thing{}
		pathA(w, o)
		w.SetFinalizer(o, nil)
		if ss := w.stackSamples(KindFinalizer); len(ss) != 0 {
			t.Fatalf("rate %d, full stacks %v: sampled %+v", w.StackSampleRate(), w.FullStacks(), ss)
		}
	}
	if _, err := New(WithStackSampleRate(-1)); err == nil || err.Error() != "finalizerwatch: WithStackSampleRate: must be >= 0, got -1" {
		t.Fatalf("WithStackSampleRate(-1): %v", err)
	}
}

// TestStackSamplesPaths: registrations that take two paths in turn are
// sampled on each path as often, one in rate: a sample every rate-th
// registration, which a per-site count could make, would see one path only.
func TestStackSamplesPaths(t *testing.T) {
	const rate, n = 16, 32000
	w := newWatcher(t, WithStackSampleRate(rate))
	o := &thing{}
	for i := range n {
		if i%2 == 0 {
			pathA(w, o)
		} else {
			pathB(w, o)
		}
		w.SetFinalizer(o, nil)
	}
	by := samplesByCaller(t, w, KindFinalizer)
	mean := float64(n/2) / rate
	sd := math.Sqrt(mean * (1 - 1.0/rate))
	for _, path := range []string{"path-a", "path-b"} {
		got := by[testkit.MarkerLine(t, "sample_test.go", path)].Sampled
		if math.Abs(float64(got)-mean) > 6*sd {
			t.Errorf("%s: %d of %d registrations sampled at rate %d, want %.0f ± %.0f", path, got, n/2, rate, mean, 6*sd)
		}
	}
}

// TestSetStackSampleRate: a new rate holds from the next registration at
// every site, including sites that drew their next sample at the old one.
func TestSetStackSampleRate(t *testing.T) {
	w := newWatcher(t, WithStackSampleRate(0))
	o := &thing{}
	sampled := func() (n uint64) {
		for _, s := range w.stackSamples(KindFinalizer) {
			n += s.Sampled
		}
		return n
	}
	// At rate 2^31, a site draws a gap that 100 registrations do not reach
	// but about once in 20 million runs.
	for _, step := range []struct {
		rate int
		want uint64 // sampled so far
	}{{0, 0}, {1, 100}, {0, 100}, {math.MaxInt32, 100}, {1, 200}} {
		w.SetStackSampleRate(step.rate)
		for range 100 {
			pathA(w, o)
			w.SetFinalizer(o, nil)
		}
		if got := sampled(); got != step.want {
			t.Fatalf("at rate %d: %d registrations sampled, want %d", step.rate, got, step.want)
		}
	}
}

// TestSampleRateDraws: a registration is sampled with probability
// 1/rate: the share of draws under the threshold, at several rates.
func TestSampleRateDraws(t *testing.T) {
	w, err := New()
	if err != nil {
		t.Fatal(err)
	}
	for _, rate := range []int64{1, 2, 16, 512} {
		w.sampleThreshold.Store(sampleThreshold(rate))
		const n = 200_000
		hits := 0.0
		for range n {
			if w.sampleNow() {
				hits++
			}
		}
		p := 1 / float64(rate)
		if sd := math.Sqrt(n * p * (1 - p)); math.Abs(hits-n*p) > 6*sd+1e-9 {
			t.Errorf("rate %d: %v of %d draws sampled, want %.0f ± %.0f", rate, hits, n, n*p, 6*sd)
		}
	}
	w.sampleThreshold.Store(sampleThreshold(0))
	if w.sampleNow() {
		t.Error("rate 0 sampled a registration")
	}
}
