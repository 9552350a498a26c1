package heapprofile

import (
	"bytes"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gcprobe/probe/internal/testkit"
	"github.com/gcprobe/probe/stackcapture"
)

var repeatSink string

// repeat allocates n bytes in 1 MiB strings through strings.Repeat: the
// line is the site, the allocation happens in the standard library.
//
//go:noinline
func repeat(n int) {
	for range n >> 20 {
		repeatSink = strings.Repeat("x", 1<<20) // marker: repeat
	}
}

func TestPathToTheAllocation(t *testing.T) {
	line := testkit.MarkerLine(t, "path_test.go", "repeat")
	p, c := newProfiler(t)
	publish()
	p.Sample()
	for w := 1; w <= 3; w++ {
		repeat(64 << 20)
		publish()
		c.t = c.t.Add(10 * time.Second)
		p.Sample()
		for _, s := range p.Snapshot().Allocating {
			if !isLine(s, "path_test.go", line) {
				continue
			}
			if len(s.Path) == 0 || s.Path[0].Function != "strings.Repeat" || !strings.HasPrefix(s.Path[len(s.Path)-1].Function, "strings.") {
				t.Fatalf("path %v: want strings.Repeat first, the strings function that allocated last", s.Path)
			}
			for _, f := range s.Path {
				if isRuntime(f) {
					t.Errorf("the path holds the runtime's frame %v", f)
				}
			}
			if s.Stack[0].Line != line {
				t.Errorf("stack %v does not begin at the site", s.Stack)
			}
			if got, want := s.PathString(), "path_test.go:"+strconv.Itoa(line)+" → strings.Repeat"; !strings.HasPrefix(got, want) {
				t.Errorf("PathString %q, want it to begin %q", got, want)
			}
			return
		}
	}
	t.Fatalf("the line %d was not an allocating site within three windows: %+v", line, p.Snapshot().Allocating)
}

// userPCs returns this function's stack, from its own line outward.
//
//go:noinline
func userPCs() []uintptr {
	pcs := make([]uintptr, 16)
	return pcs[:runtime.Callers(1, pcs)] // marker: user-pcs
}

func TestOneLineTwoPathsKeepsTheHeaviest(t *testing.T) {
	line := testkit.MarkerLine(t, "path_test.go", "user-pcs")
	user := userPCs()
	f := &fakeProfile{}
	f.add(append([]uintptr{funcPC(runtime.GC), funcPC(strings.Repeat)}, user...), 1, 64<<20, 0)
	f.add(append([]uintptr{funcPC(runtime.GC), funcPC(bytes.Repeat)}, user...), 1, 64<<20, 0)
	p, c := fakeProfiler(t, f)
	step := func(objs ...int64) Site {
		t.Helper()
		for i, n := range objs {
			f.recs[i].AllocObjects += n
			f.recs[i].AllocBytes += n * 64 << 20
		}
		c.t = c.t.Add(10 * time.Second)
		p.Sample()
		sn := p.Snapshot()
		if len(sn.Allocating) != 1 || !isLine(sn.Allocating[0], "path_test.go", line) {
			t.Fatalf("two paths into line %d are not one site: %+v", line, sn.Allocating)
		}
		return sn.Allocating[0]
	}
	p.Sample()
	// The second stack seen allocated most: its path is the site's.
	if s := step(1, 3); s.AllocBytes != 4*64<<20 || len(s.Path) != 1 || s.Path[0].Function != "bytes.Repeat" || s.Stack[0].Line != line {
		t.Errorf("window 1: %+v, want both stacks' 256 MiB and the heavier's path, bytes.Repeat", s)
	}
	// The path is kept, whichever allocates most later.
	if s := step(5, 0); len(s.Path) != 1 || s.Path[0].Function != "bytes.Repeat" {
		t.Errorf("window 2: path %v, want bytes.Repeat's still", s.Path)
	}
}

func TestPathString(t *testing.T) {
	site := stackcapture.Frame{Function: "github.com/caddyserver/caddy/v2/modules/caddyhttp.(*ResponseWriterWrapper).ReadFrom",
		File: "/src/caddy/modules/caddyhttp/responsewriter.go", Line: 50}
	fn := func(names ...string) []stackcapture.Frame {
		var fs []stackcapture.Frame
		for _, n := range names {
			fs = append(fs, stackcapture.Frame{Function: n, File: "/x.go", Line: 1})
		}
		return fs
	}
	long := "example.com/gen.Map[" + strings.Repeat("example.com/deep/pkg.Type,", 10) + "]"
	tests := []struct {
		name string
		give Site
		want string
	}{
		{"the site alone", Site{Frame: site}, "responsewriter.go:50"},
		{"one hop", Site{Frame: site, Path: fn("io.copyBuffer")}, "responsewriter.go:50 → io.copyBuffer"},
		{"three hops", Site{Frame: site, Path: fn("io.Copy", "io.copyBuffer", "bytes.(*Buffer).grow")},
			"responsewriter.go:50 → io.Copy → io.copyBuffer → bytes.(*Buffer).grow"},
		{"cut", Site{Frame: site, Path: fn("io.Copy", "io.copyBuffer", "bufio.(*Writer).ReadFrom", "bytes.(*Buffer).grow", "bytes.growSlice")},
			"responsewriter.go:50 → io.Copy → … → bytes.(*Buffer).grow → bytes.growSlice"},
		{"a module's package folders dropped", Site{Frame: site, Path: fn("github.com/a/b/c.(*T).f")}, "responsewriter.go:50 → c.(*T).f"},
		{"the standard library's kept", Site{Frame: site, Path: fn("internal/sync.newEntryNode[...]", "net/http.(*conn).serve")},
			"responsewriter.go:50 → internal/sync.newEntryNode[...] → net/http.(*conn).serve"},
		{"a long name is bounded", Site{Frame: site, Path: fn(long)},
			"responsewriter.go:50 → gen.Map[example.com/deep/pkg.T…pe,example.com/deep/pkg.Type,]"},
		{"the runtime's site", Site{Frame: runtimeSiteFrame}, RuntimeSite},
		{"invalid UTF-8", Site{Frame: site, Path: fn("a.\xff")}, "responsewriter.go:50 → a.\uFFFD"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.give.PathString(); got != tt.want {
				t.Errorf("PathString() = %q, want %q", got, tt.want)
			}
		})
	}
	many := Site{Frame: site, Path: fn(long, long, long, long, long)}
	if got := many.PathString(); len(got) > MaxPathLen || strings.Count(got, " → ") != MaxPathHops+1 {
		t.Errorf("five long hops: %d bytes, %q", len(got), got)
	}
}
