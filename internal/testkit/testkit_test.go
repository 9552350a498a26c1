package testkit

import "testing"

type fatalRecorder struct {
	testing.TB
	failed bool
}

func (f *fatalRecorder) Helper()               {}
func (f *fatalRecorder) Fatalf(string, ...any) { f.failed = true }

func TestMarkerLine(t *testing.T) {
	if got := MarkerLine(t, "testkit_test.go", "here"); got != 24 {
		t.Fatalf("MarkerLine = %d, want 24", got)
	}
	f := &fatalRecorder{TB: t}
	MarkerLine(f, "testkit_test.go", "nowhere")
	if !f.failed {
		t.Fatal("a missing marker did not fail the test")
	}
}

var _ = "planted" // marker: here
