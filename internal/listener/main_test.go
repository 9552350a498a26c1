package listener

import (
	"testing"

	"go.uber.org/goleak"
)

// The tests read and close connections from goroutines of their own:
// goleak checks that each of them ended.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
