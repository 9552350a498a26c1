package pprofexporter

import (
	"testing"
	"time"

	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/internal/ledgertest"
	"github.com/gcprobe/probe/internal/testkit"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// The runtime's own cleanup goroutine, caught while it runs a
		// cleanup: goleak v1.3.0 does not know it as a system goroutine.
		goleak.IgnoreAnyFunction("runtime.runCleanups"))
}

// obj is what tests register finalizers and cleanups on: big enough, and
// with a pointer, never to be tiny-allocated.
type obj struct {
	p *int
	_ [48]byte
}

func finalizeObj(*obj) {}
func cleanupObj(int)   {}

// kept holds the objects tests leak on purpose.
var kept []*obj

// plantLeak registers n finalizers whose objects it keeps.
func plantLeak(w *finalizerwatch.Watcher, n int) {
	for range n {
		o := new(obj)
		w.SetFinalizer(o, finalizeObj) // marker: leak
		kept = append(kept, o)
	}
}

// churn adds n cleanups whose objects it drops.
func churn(w *finalizerwatch.Watcher, n int) {
	for i := range n {
		finalizerwatch.AddCleanupTo(w, new(obj), cleanupObj, i) // marker: churn
	}
}

// plantedWatcher returns a closed watcher with a leak of 7 finalizers, all
// suspects, and a churn of 50 cleanups, all run.
func plantedWatcher(t testing.TB) *finalizerwatch.Watcher {
	t.Helper()
	w, err := finalizerwatch.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	t.Cleanup(func() { kept = nil })
	plantLeak(w, 7)
	churn(w, 50)
	cycled := ledgertest.ClocksAdvanced(w, uint64(w.SuspectCycles())+1)
	testkit.AwaitGC(t, 30*time.Second, "GC cycles and the churn to run", func() bool {
		return cycled() && ledgertest.Totals(w, finalizerwatch.KindCleanup).Executed == 50
	})
	w.Close()
	return w
}
