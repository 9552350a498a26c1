package k8sfinalizers

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain stops the shared envtest control plane, if a test started it,
// and then checks that no test left a goroutine behind. client-go and
// controller-runtime start a few goroutines once per process and never
// stop them; those are listed in processWideGoroutines and nothing else is
// forgiven.
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
// controller-runtime start once per process and never stop.
var processWideGoroutines = []goleak.Option{
	goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
}
