package stackcapture

import (
	"math"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

//go:noinline
func captureHere() (*Stack, int, *Table) {
	tab, _ := NewTable()
	var pcs [MaxDepth]uintptr
	_, _, line, _ := runtime.Caller(0)
	n := Callers(0, pcs[:]) // line+1
	return tab.Intern(pcs[:n]), line + 1, tab
}

func TestInternSymbolizesSite(t *testing.T) {
	s, line, _ := captureHere()
	site := s.Site()
	if !strings.HasSuffix(site.Function, ".captureHere") || site.Line != line {
		t.Fatalf("Site = %v, want captureHere at line %d", site, line)
	}
	if got := site.String(); !strings.HasSuffix(got, "table_test.go:"+strconv.Itoa(line)) || !strings.HasPrefix(got, "github.com/gcprobe/probe/stackcapture.captureHere ") {
		t.Fatalf("Site().String() = %q", got)
	}
	fr := s.Frames()
	if len(fr) < 2 || !strings.HasSuffix(fr[1].Function, ".TestInternSymbolizesSite") {
		t.Fatalf("Frames = %v", fr)
	}
}

func TestInternDedupes(t *testing.T) {
	tab, _ := NewTable(WithLimit(8))
	a := tab.Intern([]uintptr{1, 2, 3})
	b := tab.Intern([]uintptr{1, 2, 3})
	c := tab.Intern([]uintptr{1, 2})
	if a != b || a == c || tab.Len() != 2 {
		t.Fatalf("a==b %v, a==c %v, Len %d", a == b, a == c, tab.Len())
	}
	if n := testing.AllocsPerRun(100, func() { tab.Intern([]uintptr{1, 2, 3}) }); n != 0 {
		t.Fatalf("interning a known stack allocates %v times", n)
	}
}

func TestInternCutsDeepStacks(t *testing.T) {
	tab, _ := NewTable()
	deep := make([]uintptr, MaxDepth+10)
	for i := range deep {
		deep[i] = uintptr(i + 1)
	}
	if got := len(tab.Intern(deep).PCs()); got != MaxDepth {
		t.Fatalf("kept %d PCs, want %d", got, MaxDepth)
	}
}

func TestSiteSkipsRuntimeAndLibraryFrames(t *testing.T) {
	tests := []struct {
		name string
		give []Frame
		want string
	}{
		{"runtime first", []Frame{{Function: "runtime.gopanic"}, {Function: "main.f", File: "/a/main.go"}}, "main.f"},
		{"library first", []Frame{{Function: "github.com/gcprobe/probe/finalizerwatch.SetFinalizer", File: "/m/finalizerwatch/setfinalizer.go"}, {Function: "main.g", File: "/a/main.go"}}, "main.g"},
		{"module test code is user code", []Frame{{Function: "github.com/gcprobe/probe/finalizerwatch.TestLeak", File: "/m/finalizerwatch/leak_test.go"}}, "github.com/gcprobe/probe/finalizerwatch.TestLeak"},
		{"examples are user code", []Frame{{Function: "github.com/gcprobe/probe/examples/leakdemo/internal.plant", File: "/m/examples/leakdemo/internal/plant.go"}}, "github.com/gcprobe/probe/examples/leakdemo/internal.plant"},
		{"all internal", []Frame{{Function: "runtime.a"}, {Function: "runtime.goexit"}}, "runtime.goexit"},
		{"empty", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := siteOf(tt.give).Function; got != tt.want {
				t.Fatalf("siteOf = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestNewTableRejectsBadLimit(t *testing.T) {
	for _, n := range []int{0, -1, MaxLimit + 1, MaxLimit * 4, math.MaxInt} {
		if _, err := NewTable(WithLimit(n)); err == nil || !strings.Contains(err.Error(), "WithLimit") {
			t.Errorf("WithLimit(%d): err = %v", n, err)
		}
	}
	if _, err := NewTable(nil); err == nil {
		t.Error("NewTable(nil) succeeded")
	}
}

// A million distinct stacks must not grow the table past its limit; the
// rest fold into the overflow stack and are counted.
func TestMillionDistinctStacksStayBounded(t *testing.T) {
	const limit, total = 4096, 1_000_000
	tab, _ := NewTable(WithLimit(limit))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	pcs := make([]uintptr, 8)
	for i := range total {
		for j := range pcs {
			pcs[j] = uintptr(i*8 + j + 1)
		}
		tab.Intern(pcs)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if tab.Len() > limit {
		t.Fatalf("table holds %d stacks, limit %d", tab.Len(), limit)
	}
	if got := tab.Overflowed(); got != total-uint64(tab.Len()) {
		t.Fatalf("Overflowed = %d, want %d", got, total-tab.Len())
	}
	if s := tab.Intern([]uintptr{0xdead}); !s.Overflow() || s.Site().Function != "gcprobe.overflow" {
		t.Fatalf("a stack past the limit interned as %v", s.Site())
	}
	grown := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("1e6 distinct stacks, limit %d: %d stored, %d folded, heap +%d KiB", limit, tab.Len(), tab.Overflowed(), grown/1024)
	runtime.KeepAlive(tab)
}
