package k8sfinalizers

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain stops the shared envtest control plane, if a test started it,
// and then checks that no test left a goroutine behind. client-go and
// controller-runtime leave a few goroutines that no Stop ends; those are
// listed in processWideGoroutines and nothing else is forgiven.
func TestMain(m *testing.M) {
	code := m.Run()
	if err := stopEnv(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping envtest:", err)
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(processWideGoroutines...); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// processWideGoroutines are goroutines that client-go and
// controller-runtime leave running, whatever the test stops.
var processWideGoroutines = []goleak.Option{
	goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
	// controller-runtime wraps a metadata informer's watch in
	// apimachinery's watch.Filter, whose goroutine blocks forever sending
	// an event that arrived as the informer stopped: kubernetes/kubernetes
	// issue 113254. It holds one event, not the watcher.
	goleak.IgnoreTopFunction("k8s.io/apimachinery/pkg/watch.(*filteredWatch).loop"),
}
