package stackcapture

import (
	"reflect"
	"runtime"
	"sync"
	"testing"
)

// pcInInlined returns a return PC inside pcInInlined whose call sits in
// pcFramesInlined, inlined there: a PC that stands for two frames.
//
//go:noinline
func pcInInlined() uintptr { return pcFramesInlined() }

func pcFramesInlined() uintptr { return returnPC() } // inlined into pcInInlined

// returnPC returns its own return PC, as SetFinalizer takes its caller's.
//
//go:noinline
func returnPC() uintptr { return CallerPC(1) }

// expansion symbolizes pc as PCFrames promises to: runtime.CallersFrames
// of pc followed by 0.
func expansion(pc uintptr) []Frame {
	var out []Frame
	it := runtime.CallersFrames([]uintptr{pc, 0})
	for {
		f, more := it.Next()
		if f.PC != 0 || f.Function != "" {
			out = append(out, Frame{Function: f.Function, File: f.File, Line: f.Line, PC: f.PC})
		}
		if !more {
			return out
		}
	}
}

func TestPCFramesExpandsInlinedCalls(t *testing.T) {
	pc := pcInInlined()
	got := PCFrames(pc)
	if !reflect.DeepEqual(got, expansion(pc)) {
		t.Fatalf("PCFrames = %v, want %v", got, expansion(pc))
	}
	if len(got) != 2 || got[0].Function != modulePrefix+"stackcapture.pcFramesInlined" ||
		got[1].Function != modulePrefix+"stackcapture.pcInInlined" {
		t.Fatalf("PCFrames = %v, want pcFramesInlined inlined into pcInInlined", got)
	}
	// The site of a PC is its innermost frame: a site keeps a pointer to
	// PCFrames(pc)[0] in place of SiteOfPC's copy.
	if site := SiteOfPC(pc); site != got[0] {
		t.Errorf("SiteOfPC = %v, PCFrames(pc)[0] = %v: they must be the same frame", site, got[0])
	}
	if again := PCFrames(pc); &again[0] != &got[0] {
		t.Error("second PCFrames of one PC symbolized again; want the cached frames")
	}
}

// TestPCFramesStable fills more than one chunk of the cache's store and
// checks that the frames given out earlier are still where they were,
// unchanged: sites keep pointers into the store.
func TestPCFramesStable(t *testing.T) {
	// PCs inside some functions: each is a distinct key, symbolized to
	// some line of its function.
	var pcs []uintptr
	for _, f := range []any{PCFrames, TestPCFramesStable, Callers, walkFP, reflect.DeepEqual, runtime.CallersFrames} {
		fn := runtime.FuncForPC(reflect.ValueOf(f).Pointer())
		for pc := fn.Entry() + 1; runtime.FuncForPC(pc) == fn; pc++ {
			pcs = append(pcs, pc)
		}
	}
	if len(pcs) < 2*frameChunkLen+10 {
		t.Fatalf("test broken: %d PCs, want more than two chunks' worth", len(pcs))
	}
	type kept struct {
		pc uintptr
		p  *Frame
		f  Frame
	}
	var ks []kept
	for _, pc := range pcs {
		fs := PCFrames(pc)
		if len(fs) == 0 {
			t.Fatalf("PCFrames(%#x) is empty", pc)
		}
		ks = append(ks, kept{pc, &fs[0], fs[0]})
	}
	for _, k := range ks {
		if *k.p != k.f {
			t.Fatalf("frame of %#x moved or changed: %v, was %v", k.pc, *k.p, k.f)
		}
		if fs := PCFrames(k.pc); &fs[0] != k.p {
			t.Fatalf("PCFrames(%#x) no longer gives the cached frame", k.pc)
		}
		if want := expansion(k.pc); !reflect.DeepEqual(PCFrames(k.pc), want) {
			t.Fatalf("PCFrames(%#x) = %v, want %v", k.pc, PCFrames(k.pc), want)
		}
	}
}

func TestPCFramesConcurrent(t *testing.T) {
	base := reflect.ValueOf(TestPCFramesConcurrent).Pointer()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range uintptr(64) {
				pc := base + 1 + (i+uintptr(g)*7)%64
				if got, want := PCFrames(pc), expansion(pc); !reflect.DeepEqual(got, want) {
					t.Errorf("PCFrames(%#x) = %v, want %v", pc, got, want)
					return
				}
			}
		})
	}
	wg.Wait()
}

// captureSiteLine captures its own stack: the stacks of its two callers below
// differ, and share their site, this function's line.
//
//go:noinline
func captureSiteLine() []uintptr {
	pcs := make([]uintptr, MaxDepth)
	return pcs[:Callers(0, pcs)]
}

//go:noinline
func captureSiteFromA() []uintptr { return captureSiteLine() }

//go:noinline
func captureSiteFromB() []uintptr { return captureSiteLine() }

// TestStacksShareTheirSiteFrame checks that stacks into one site keep one
// frame between them, the frame cache's, not a copy each.
func TestStacksShareTheirSiteFrame(t *testing.T) {
	tab, err := NewTable()
	if err != nil {
		t.Fatal(err)
	}
	a, b := tab.Intern(captureSiteFromA()), tab.Intern(captureSiteFromB())
	if a == b {
		t.Fatal("test broken: the two stacks are one")
	}
	if a.Site() != b.Site() || a.Site().Function != modulePrefix+"stackcapture.captureSiteLine" {
		t.Fatalf("sites %v and %v, want captureSiteLine for both", a.Site(), b.Site())
	}
	if a.site.Load() != b.site.Load() {
		t.Error("two stacks into one site keep a frame each; want the one the frame cache holds")
	}
}
