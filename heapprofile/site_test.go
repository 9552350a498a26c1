package heapprofile

import (
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gcprobe/probe/internal/symname"
	"github.com/gcprobe/probe/internal/testkit"
	"github.com/gcprobe/probe/stackcapture"
)

// fakeProfile is a heap profile a test writes: Profiler.read copies it as
// runtime.MemProfile copies the runtime's.
type fakeProfile struct{ recs []runtime.MemProfileRecord }

func (f *fakeProfile) read(dst []runtime.MemProfileRecord) (int, bool) {
	if len(dst) < len(f.recs) {
		return len(f.recs), false
	}
	copy(dst, f.recs)
	return len(f.recs), true
}

// add appends a stack that allocated objs objects of size bytes each and
// freed freed of them.
func (f *fakeProfile) add(stk []uintptr, objs, size, freed int64) {
	var r runtime.MemProfileRecord
	copy(r.Stack0[:], stk)
	r.AllocObjects, r.AllocBytes = objs, objs*size
	r.FreeObjects, r.FreeBytes = freed, freed*size
	f.recs = append(f.recs, r)
}

// fakeProfiler reads f, with a GC cycle before every read.
func fakeProfiler(t *testing.T, f *fakeProfile, opts ...Option) (*Profiler, *clock) {
	t.Helper()
	p, c := newProfiler(t, opts...)
	p.read = f.read
	var cycle uint64
	p.cycles = func() uint64 { cycle++; return cycle }
	return p, c
}

// funcPC returns a PC inside fn, which symbolizes to fn's first line: a
// real frame of a function a test cannot call into at will (the
// runtime's, the standard library's).
func funcPC(fn any) uintptr { return reflect.ValueOf(fn).Pointer() + 1 }

// stdStack returns real return PCs of the standard library and the
// runtime only: strings.Map's call of its mapping function, and the
// callers of this test (testing.tRunner, runtime.goexit), without the
// test's own frames.
func stdStack(t *testing.T) []uintptr {
	t.Helper()
	var pcs [32]uintptr
	n := 0
	strings.Map(func(r rune) rune { n = runtime.Callers(1, pcs[:]); return r }, "x")
	var out []uintptr
	for _, pc := range pcs[:n] {
		if stackcapture.OriginOf(pc) != stackcapture.OriginUser {
			out = append(out, pc)
		}
	}
	return out
}

func TestSiteIsNeverTheRuntime(t *testing.T) {
	std := stdStack(t)
	if len(std) < 2 || !strings.HasPrefix(stackcapture.SiteOfPC(std[0]).Function, "strings.Map") {
		t.Fatalf("the standard library's stack is not strings.Map's: %v", std)
	}
	rt := []uintptr{funcPC(runtime.GC), funcPC(runtime.Gosched), funcPC(runtime.NumGoroutine)}
	tests := []struct {
		name      string
		give      []uintptr
		wantFunc  string // the site's function, a prefix
		wantLabel string // when the label is exact
	}{
		{name: "the runtime below the standard library", give: append(rt[:2:2], std...), wantFunc: "strings.Map"},
		{name: "the standard library alone", give: std, wantFunc: "strings.Map"},
		{name: "a method value's wrapper is passed", give: append([]uintptr{rt[0], funcPC(new(sync.Map).Store)}, std...), wantFunc: "strings.Map"},
		{name: "the runtime alone", give: rt, wantFunc: RuntimeSite, wantLabel: RuntimeSite},
		{name: "another runtime stack shares the runtime's site", give: rt[1:], wantFunc: RuntimeSite, wantLabel: RuntimeSite},
	}
	f := &fakeProfile{}
	for _, tt := range tests {
		f.add(tt.give, 1, 64<<20, 0) // one object of 64 MiB: always sampled, scaled by 1
	}
	p, c := fakeProfiler(t, f)
	p.Sample()
	for i := range f.recs {
		f.recs[i].AllocObjects++
		f.recs[i].AllocBytes += 64 << 20
	}
	c.t = c.t.Add(10 * time.Second)
	p.Sample()
	sn := p.Snapshot()
	if len(sn.Allocating) != 2 || sn.Sites != 2 {
		t.Fatalf("want two sites (strings.Map and the runtime's), got %d: %+v", sn.Sites, sn.Allocating)
	}
	bySite := map[string]Site{}
	for _, s := range sn.Allocating {
		bySite[s.Label()] = s
		if isRuntime(s.Frame) {
			t.Errorf("site %v is a runtime frame", s.Frame)
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p.mu.Lock()
			s := p.sites[p.bucketOf(&runtime.MemProfileRecord{Stack0: stack0(tt.give)}).site]
			p.mu.Unlock()
			if !strings.HasPrefix(s.frame.Function, tt.wantFunc) {
				t.Errorf("site %v, want %s", s.frame, tt.wantFunc)
			}
			site := Site{Frame: s.frame}
			if tt.wantLabel != "" && site.Label() != tt.wantLabel {
				t.Errorf("label %q, want %q", site.Label(), tt.wantLabel)
			}
		})
	}
	rts := bySite[RuntimeSite]
	if rts.AllocBytes != 2*64<<20 || rts.Frame.File != "" || rts.Frame.Line != 0 || len(rts.Stack) != 1 {
		t.Errorf("the runtime's site: %+v, want both runtime stacks' 128 MiB, no file:line", rts)
	}
}

func stack0(stk []uintptr) (s [32]uintptr) {
	copy(s[:], stk)
	return s
}

// TestRealProfileHasNoRuntimeSite reads this process's own profile, which
// holds the runtime's stacks (runtime.GC's workers, at least once their
// allocations are sampled): no site is a runtime frame.
func TestRealProfileHasNoRuntimeSite(t *testing.T) {
	p, _ := newProfiler(t)
	publish()
	p.Sample()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.sites {
		if isRuntime(s.frame) {
			t.Errorf("site %v is a runtime frame", s.frame)
		}
	}
}

func TestIsRuntime(t *testing.T) {
	tests := []struct {
		name string
		give stackcapture.Frame
		want bool
	}{
		{"runtime", stackcapture.Frame{Function: "runtime.mallocgc", File: "/usr/local/go/src/runtime/malloc.go"}, true},
		{"internal/runtime", stackcapture.Frame{Function: "internal/runtime/maps.newarray", File: "/go/src/internal/runtime/maps/map.go"}, true},
		{"runtime/internal", stackcapture.Frame{Function: "runtime/internal/sys.X", File: "/go/src/runtime/internal/sys/x.go"}, true},
		{"linknamed into reflect", stackcapture.Frame{Function: "reflect.unsafe_New", File: "/usr/local/go/src/runtime/malloc.go"}, true},
		{"linknamed, -trimpath", stackcapture.Frame{Function: "internal/bytealg.MakeNoZero", File: "runtime/slice.go"}, true},
		{"runtime/pprof is not the runtime", stackcapture.Frame{Function: "runtime/pprof.StartCPUProfile", File: "/go/src/runtime/pprof/pprof.go"}, false},
		{"sync", stackcapture.Frame{Function: "sync.(*Map).Store", File: "/go/src/sync/map.go"}, false},
		{"a module named like the runtime", stackcapture.Frame{Function: "example.com/runtime.F", File: "/src/runtime/f.go"}, false},
		{"main in a folder named runtime", stackcapture.Frame{Function: "main.main", File: "/home/me/src/runtime/main.go"}, false},
		{"a module's method named runtime", stackcapture.Frame{Function: "example.com/x.runtime", File: "/src/x/x.go"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := isRuntime(tt.give); got != tt.want {
				t.Errorf("isRuntime(%v) = %v, want %v", tt.give, got, tt.want)
			}
		})
	}
}

// syncMapStack returns the shape of an encoding/gob init storing into a
// sync.Map, which has no user frame: a stack of the runtime's profile that
// allocated below sync.(*Map).Store, cut there (Store may be inlined into
// this test's frame), and a PC in Store itself in place of the rest. It
// stores in batches until the runtime has sampled such an allocation.
func syncMapStack(t *testing.T) []uintptr {
	t.Helper()
	var m sync.Map
	var recs []runtime.MemProfileRecord
	var found []uintptr
	next := 0
	testkit.Poll(t, 60*time.Second, "a sampled allocation in sync.(*Map).Store", func() bool {
		for range 20_000 {
			m.Store(next, nil)
			next++
		}
		publish()
		n, _ := runtime.MemProfile(nil, true)
		recs = append(recs[:0], make([]runtime.MemProfileRecord, n+64)...)
		n, _ = runtime.MemProfile(recs, true)
		for _, r := range recs[:n] {
			var below []uintptr
			internal := false
		stack:
			for _, pc := range r.Stack() {
				for _, f := range stackcapture.PCFrames(pc) {
					if f.Function == "sync.(*Map).Store" {
						if internal {
							found = append(below, funcPC((*sync.Map).Store))
							return true
						}
						break stack
					}
				}
				if stackcapture.OriginOf(pc) == stackcapture.OriginUser {
					break
				}
				below = append(below, pc)
				internal = internal || strings.HasPrefix(stackcapture.SiteOfPC(pc).Function, "internal/sync.")
			}
		}
		return false
	})
	return found
}

func TestSiteSkipsTheStandardLibrarysInternals(t *testing.T) {
	stk := syncMapStack(t)
	f, at := findSite(stk)
	if f.Function != "sync.(*Map).Store" || at < 0 {
		t.Fatalf("site %v, want sync.(*Map).Store, not the runtime or internal/sync", f)
	}
	s := &siteState{frame: f, pcs: stk, at: at}
	stack, path := symbolize(s)
	if len(path) == 0 || stack[0].Function != "sync.(*Map).Store" {
		t.Fatalf("stack %v, path %v: want the site first, then a path through internal/sync", stack, path)
	}
	for _, fr := range path {
		if !strings.HasPrefix(fr.Function, "internal/sync.") {
			t.Errorf("path %v holds %v, want internal/sync's frames only", path, fr)
		}
	}
	if got := (&Site{Frame: f, Path: path}).PathString(); !strings.Contains(got, "→ internal/sync.") {
		t.Errorf("PathString %q: want internal/sync's frames named so", got)
	}
	// Without sync.(*Map).Store and its callers, internal/sync is the
	// first frame outside the runtime: the site all the same.
	var inner []uintptr
	for _, pc := range stk {
		fs := stackcapture.PCFrames(pc)
		if len(fs) > 0 && (isRuntime(fs[0]) || isStdInternal(symname.PkgPath(fs[0].Function))) {
			inner = append(inner, pc)
		}
	}
	if f, at := findSite(inner); at < 0 || !strings.HasPrefix(f.Function, "internal/sync.") {
		t.Errorf("site of %v: %v, want internal/sync's first frame", inner, f)
	}
}

func TestIsStdInternal(t *testing.T) {
	tests := []struct {
		give string
		want bool
	}{
		{"internal/sync", true},
		{"net/http/internal", true},
		{"crypto/internal/fips140/aes", true},
		{"vendor/golang.org/x/net/http2/hpack", true},
		{"sync", false},
		{"net/http", false},
		{"main", false},
		{"example.com/app/internal/store", false},
	}
	for _, tt := range tests {
		if got := isStdInternal(tt.give); got != tt.want {
			t.Errorf("isStdInternal(%q) = %v, want %v", tt.give, got, tt.want)
		}
	}
}

// UserStack keeps a site's frames in order without the runtime's: package
// runtime's (goexit) and one the runtime implements under another
// package's name, which its file in the runtime's folder tells.
func TestUserStack(t *testing.T) {
	s := Site{Stack: []stackcapture.Frame{
		{Function: "main.handle", File: "/src/app/main.go", Line: 10},
		{Function: "reflect.unsafe_New", File: "/usr/local/go/src/runtime/malloc.go", Line: 1},
		{Function: "net/http.(*conn).serve", File: "/usr/local/go/src/net/http/server.go", Line: 2},
		{Function: "runtime.goexit", File: "/usr/local/go/src/runtime/asm_amd64.s", Line: 3},
	}}
	var got []string
	for _, f := range s.UserStack() {
		got = append(got, f.Function)
	}
	if want := []string{"main.handle", "net/http.(*conn).serve"}; !slices.Equal(got, want) {
		t.Errorf("UserStack = %q, want %q", got, want)
	}
	if len(s.Stack) != 4 {
		t.Errorf("UserStack changed the site's Stack: %d frames", len(s.Stack))
	}
}
