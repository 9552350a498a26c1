package heapprofile

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// The runtime's own cleanup goroutine, caught while it runs a
		// cleanup: goleak v1.3.0 does not know it as a system goroutine.
		goleak.IgnoreAnyFunction("runtime.runCleanups"))
}
