package promexporter

import (
	"testing"

	"github.com/gcprobe/probe/finalizerwatch"
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
