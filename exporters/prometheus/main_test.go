package promexporter

import (
	"runtime"
	"testing"
	"time"

	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/internal/ledgertest"
	"go.uber.org/goleak"
)

//go:generate go run ./internal/gensites -n 300 -o sites_gen_test.go

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// The runtime's own cleanup goroutine, caught while it runs a
		// cleanup: goleak v1.3.0 does not know it as a system goroutine.
		goleak.IgnoreAnyFunction("runtime.runCleanups"))
}

// siteObj is what tests register finalizers and cleanups on: big enough,
// and with a pointer, never to be tiny-allocated (a tiny block's finalizer
// may never run).
type siteObj struct {
	p *int
	_ [48]byte
}

func finalizeSiteObj(*siteObj) {}
func cleanupSiteObj(int)       {}

// newWatcher returns a fresh Watcher that the test closes.
func newWatcher(t testing.TB, opts ...finalizerwatch.Option) *finalizerwatch.Watcher {
	t.Helper()
	w, err := finalizerwatch.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return w
}

// newCollector returns New(opts...) or fails the test.
func newCollector(t testing.TB, opts ...Option) *Collector {
	t.Helper()
	c, err := New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

const awaitTimeout = 30 * time.Second

// await forces GC cycles until cond holds, failing the test at the
// deadline. GC is what moves the watcher's clocks and runs finalizers;
// Gosched lets the finalizer and cleanup goroutines catch up.
func await(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(awaitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", awaitTimeout, what)
		}
		runtime.GC()
		runtime.Gosched()
	}
}

// awaitCycles waits until both of w's GC clocks have advanced n cycles.
func awaitCycles(t testing.TB, w *finalizerwatch.Watcher, n uint64) {
	t.Helper()
	fin, cln := ledgertest.Cycles(w, finalizerwatch.KindFinalizer)+n, ledgertest.Cycles(w, finalizerwatch.KindCleanup)+n
	await(t, "GC cycles", func() bool {
		return ledgertest.Cycles(w, finalizerwatch.KindFinalizer) >= fin && ledgertest.Cycles(w, finalizerwatch.KindCleanup) >= cln
	})
}
