package stackcapture

import (
	"runtime"
	"testing"
)

// TestSiteOfPCsMatchesFrames checks that Site, which symbolizes only as far
// as the site, finds the frame that the stack's full symbolization does,
// for every suffix of a real stack: user frames first, library or runtime
// frames first, and a tail of runtime frames only.
func TestSiteOfPCsMatchesFrames(t *testing.T) {
	var pcs [MaxDepth]uintptr
	n := runtime.Callers(0, pcs[:]) // runtime.Callers first: internal
	if n < 3 {
		t.Fatalf("captured %d PCs", n)
	}
	tab, _ := NewTable()
	for i := range n {
		s := tab.Intern(pcs[i:n])
		want := siteOf(symbolize(pcs[i:n]))
		if got := s.Site(); got != want {
			t.Errorf("suffix %d: Site = %v, want %v", i, got, want)
		}
		if got := s.Site(); got != want { // cached
			t.Errorf("suffix %d: Site again = %v, want %v", i, got, want)
		}
		if got := len(s.Frames()); got != len(symbolize(pcs[i:n])) {
			t.Errorf("suffix %d: %d frames, want %d", i, got, len(symbolize(pcs[i:n])))
		}
	}
	if got := tab.Intern(nil).Site(); got != (Frame{}) {
		t.Errorf("empty stack: Site = %v, want the zero Frame", got)
	}
}

// TestFramesAreTheCallers checks that Frames returns a slice the caller
// owns: a table keeps no frames, so writing to one result does not show
// in the next.
func TestFramesAreTheCallers(t *testing.T) {
	s, _, _ := captureHere()
	a := s.Frames()
	a[0].Function = "changed"
	if b := s.Frames(); b[0].Function == "changed" {
		t.Fatal("Frames returned the same backing array twice")
	}
}
