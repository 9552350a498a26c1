package k8sfinalizers

import (
	"testing"

	"github.com/gcprobe/probe/internal/lifecycle"
)

// ErrRunning and ErrStopped are internal/lifecycle's values, as the root
// package's, memstats', tracing's and heapprofile's are (checked in the
// root module), so that errors.Is works with any of them.
func TestLifecycleErrorsAreTheRootsValues(t *testing.T) {
	if ErrRunning != lifecycle.ErrRunning || ErrStopped != lifecycle.ErrStopped {
		t.Error("k8sfinalizers.ErrRunning, ErrStopped are not internal/lifecycle's")
	}
}
