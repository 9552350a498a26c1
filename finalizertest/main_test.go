package finalizertest

import (
	"fmt"
	"runtime/metrics"
	"testing"

	"go.uber.org/goleak"

	"github.com/gcprobe/probe/finalizerwatch"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// The runtime's own cleanup goroutine, caught while it runs a
		// cleanup: goleak v1.3.0 does not know it as a system goroutine.
		goleak.IgnoreAnyFunction("runtime.runCleanups"))
}

// fakeT records what VerifyNone reports.
type fakeT struct {
	errors  []string
	helpers int
}

func (f *fakeT) Error(args ...any) { f.errors = append(f.errors, fmt.Sprint(args...)) }
func (f *fakeT) Helper()           { f.helpers++ }

var _ TestingT = (*fakeT)(nil)
var _ TestingT = (*testing.T)(nil)
var _ TestingM = (*testing.M)(nil)

// newWatcher returns a Watcher of the test's own, closed when it ends.
func newWatcher(t testing.TB) *finalizerwatch.Watcher {
	t.Helper()
	w, err := finalizerwatch.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return w
}

// forcedGCs returns how many GC cycles the program has forced so far.
func forcedGCs() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/forced:gc-cycles"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
