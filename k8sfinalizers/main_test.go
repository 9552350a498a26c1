package k8sfinalizers

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind. The envtest
// tests start client-go and controller-runtime machinery, some of which
// lives for the whole process (klog's flush daemon, the workqueue's and
// the rate limiters' metrics); those are listed here and nothing else is
// forgiven.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, processWideGoroutines...)
}

// processWideGoroutines are goroutines that client-go and
// controller-runtime start once per process and never stop.
var processWideGoroutines = []goleak.Option{
	goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
}
