package heapprofile

import (
	"errors"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gcprobe/probe/internal/testkit"
	"github.com/gcprobe/probe/stackcapture"
)

var leafSink []byte

// allocLeaf allocates n bytes in 64 KiB objects, or, given pcs, records
// its stack there instead and returns its depth.
//
//go:noinline
func allocLeaf(n int, pcs []uintptr) int {
	if pcs != nil {
		return runtime.Callers(1, pcs)
	}
	for range n >> 16 {
		leafSink = make([]byte, 64<<10)
	}
	return 0
}

// callerOfLeaf calls allocLeaf: the stacks the test signature matches.
//
//go:noinline
func callerOfLeaf(n int, pcs []uintptr) int { return allocLeaf(n, pcs) }

// leafSignatures are the signatures the tests configure: the leaf called
// through callerOfLeaf, churn, and one that matches nothing.
var leafSignatures = []Signature{
	{Name: "leaf", Frames: []string{"heapprofile.allocLeaf", "heapprofile.callerOfLeaf"}},
	{Name: "churn", Frames: []string{"heapprofile.churn"}},
	{Name: "none", Frames: []string{"heapprofile.noSuchFunction"}},
}

func TestSignaturesOnRealStacks(t *testing.T) {
	line := testkit.MarkerLine(t, "signatures_test.go", "leaf-site")
	p, c := newProfiler(t, WithSignatures(leafSignatures...))
	publish()
	p.Sample()
	for w := 1; w <= 3; w++ {
		callerOfLeaf(32<<20, nil) // marker: leaf-site
		allocLeaf(32<<20, nil)    // the leaf alone does not match
		churn(16 << 20)
		publish()
		c.t = c.t.Add(10 * time.Second)
		p.Sample()
		sn := p.Snapshot()
		if len(sn.Signatures) != 3 {
			t.Fatalf("signatures %+v, want three in WithSignatures' order", sn.Signatures)
		}
		leaf, churned, none := sn.Signatures[0], sn.Signatures[1], sn.Signatures[2]
		if leaf.Name != "leaf" || churned.Name != "churn" || none.Name != "none" {
			t.Fatalf("signatures %+v, want leaf, churn, none", sn.Signatures)
		}
		if leaf.AllocBytes == 0 || churned.AllocBytes == 0 {
			continue // the runtime sampled nothing of them yet
		}
		// 32 MiB through callerOfLeaf, not the 32 MiB of allocLeaf alone.
		if leaf.AllocBytes < 16<<20 || leaf.AllocBytes > 48<<20 {
			t.Errorf("leaf allocated %d MiB, want about 32", leaf.AllocBytes>>20)
		}
		if leaf.Site.Line != line || !strings.HasSuffix(leaf.Site.Function, "TestSignaturesOnRealStacks") {
			t.Errorf("leaf's site %v, want this test's line %d", leaf.Site, line)
		}
		if none.AllocBytes != 0 || none.InUseBytes != 0 || none.Site != (stackcapture.Frame{}) {
			t.Errorf("a signature that matches nothing: %+v", none)
		}
		if sn.TotalAllocBytes < leaf.AllocBytes+churned.AllocBytes || leaf.AllocShare <= 0 || leaf.AllocShare >= 1 ||
			math.Abs(leaf.AllocShare-float64(leaf.AllocBytes)/float64(sn.TotalAllocBytes)) > 1e-9 {
			t.Errorf("leaf %+v of %d: shares", leaf, sn.TotalAllocBytes)
		}
		if r := leaf.AllocBytesPerSecond; math.Abs(r-float64(leaf.AllocBytes)/10) > 1 {
			t.Errorf("leaf %.0f B/s, want AllocBytes over 10 s", r)
		}
		return
	}
	t.Fatalf("the signatures saw no allocation in three windows: %+v", p.Snapshot().Signatures)
}

// leafStack returns the stack of allocLeaf called through callerOfLeaf
// from this function's marked line, or directly if direct.
//
//go:noinline
func leafStack(direct bool) []uintptr {
	pcs := make([]uintptr, 32)
	if direct {
		return pcs[:allocLeaf(0, pcs)]
	}
	return pcs[:callerOfLeaf(0, pcs)] // marker: leaf-stack
}

//go:noinline
func leafStackElsewhere() []uintptr {
	pcs := make([]uintptr, 32)
	return pcs[:callerOfLeaf(0, pcs)] // marker: leaf-stack-elsewhere
}

func TestSignaturesInjected(t *testing.T) {
	line := testkit.MarkerLine(t, "signatures_test.go", "leaf-stack")
	elsewhere := testkit.MarkerLine(t, "signatures_test.go", "leaf-stack-elsewhere")
	f := &fakeProfile{}
	const mib = 1 << 20
	f.add(leafStack(false), 4, mib, 1)     // matches leaf, at line
	f.add(leafStackElsewhere(), 2, mib, 0) // matches leaf, at elsewhere
	f.add(leafStack(true), 8, mib, 0)      // the leaf alone: no match
	f.add(userPCs(), 2, mib, 0)            // nothing to do with it
	p, c := fakeProfiler(t, f, WithSignatures(leafSignatures...))
	p.rate = func() int { return 1 } // every allocation recorded: figures unscaled
	p.Sample()
	sn := p.Snapshot()
	if leaf := sn.Signatures[0]; leaf.AllocBytes != 0 || leaf.InUseBytes != 5*mib || sn.TotalInUseBytes != 15*mib ||
		leaf.InUseShare != 5.0/15 || leaf.Site != (stackcapture.Frame{}) {
		t.Fatalf("baseline: %+v of %d in use: want no window, 5 of 15 MiB in use", leaf, sn.TotalInUseBytes)
	}

	step := func(objs ...int64) Snapshot {
		for i, n := range objs {
			f.recs[i].AllocObjects += n
			f.recs[i].AllocBytes += n * mib
		}
		c.t = c.t.Add(10 * time.Second)
		p.Sample()
		return p.Snapshot()
	}
	sn = step(3, 1, 10, 6)
	leaf := sn.Signatures[0]
	want := SignatureStat{Name: "leaf", AllocBytes: 4 * mib, AllocBytesPerSecond: 4 * mib / 10.0, InUseBytes: 9 * mib,
		AllocShare: 4.0 / 20, InUseShare: 9.0 / 35}
	want.Site = leaf.Site
	if leaf != want || sn.TotalAllocBytes != 20*mib || sn.TotalInUseBytes != 35*mib {
		t.Errorf("window 1: %+v of %d/%d, want %+v of 20/35 MiB", leaf, sn.TotalAllocBytes, sn.TotalInUseBytes, want)
	}
	if leaf.Site.Line != line || !strings.HasSuffix(leaf.Site.Function, "heapprofile.leafStack") {
		t.Errorf("window 1: site %v, want leafStack's line %d, which allocated 3 MiB to elsewhere's 1", leaf.Site, line)
	}
	if ch := sn.Signatures[1]; ch.AllocBytes != 0 || ch.Site != (stackcapture.Frame{}) {
		t.Errorf("churn matched an injected stack: %+v", ch)
	}

	// The heavier line changes: so does the site.
	sn = step(1, 5, 0, 0)
	if leaf := sn.Signatures[0]; leaf.AllocBytes != 6*mib || leaf.Site.Line != elsewhere {
		t.Errorf("window 2: %+v, want 6 MiB and the line %d, which allocated 5 of them", leaf, elsewhere)
	}
	// A window in which the signature allocated nothing names no line.
	sn = step(0, 0, 1, 0)
	if leaf := sn.Signatures[0]; leaf.AllocBytes != 0 || leaf.AllocShare != 0 || leaf.Site != (stackcapture.Frame{}) {
		t.Errorf("window 3: %+v, want nothing allocated and no site", leaf)
	}
}

func TestReadAllocatesNothing(t *testing.T) {
	tests := []struct {
		name string
		give []Option
	}{
		{"plain", nil},
		{"with signatures", []Option{WithSignatures(leafSignatures...)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeProfile{}
			f.add(leafStack(false), 4, 1<<20, 1)
			f.add(leafStackElsewhere(), 2, 1<<20, 0)
			f.add(userPCs(), 2, 1<<20, 0)
			p, _ := fakeProfiler(t, f, tt.give...)
			p.Sample()
			if n := testing.AllocsPerRun(100, func() {
				for i := range f.recs {
					f.recs[i].AllocObjects++
					f.recs[i].AllocBytes += 1 << 20
				}
				p.Sample()
			}); n != 0 {
				t.Errorf("a read allocates %v times, want 0", n)
			}
			if sn := p.Snapshot(); len(sn.Allocating) == 0 || len(sn.Signatures) != len(tt.give)*len(leafSignatures) {
				t.Errorf("no figures: %+v", sn)
			}
		})
	}
}

func TestMatchFrames(t *testing.T) {
	fs := func(names ...string) []stackcapture.Frame {
		var out []stackcapture.Frame
		for _, n := range names {
			out = append(out, stackcapture.Frame{Function: n})
		}
		return out
	}
	stack := fs("runtime.mallocgc", "encoding/json.(*decodeState).object", "encoding/json.Unmarshal",
		"example.com/op/client.(*Lister).List", "example.com/op/controller.(*R).Reconcile", "main.main")
	tests := []struct {
		name string
		give []string
		want int
	}{
		{"one frame", []string{"json.Unmarshal"}, 2},
		{"outward, with frames between", []string{"json.(*decodeState)", "controller.(*R).Reconcile"}, 4},
		{"the first of repeated matches", []string{"json."}, 1},
		{"inward is no match", []string{"Reconcile", "json.Unmarshal"}, -1},
		{"a missing frame", []string{"json.Unmarshal", "yaml.Unmarshal"}, -1},
		{"a frame matches once", []string{"Unmarshal", "Unmarshal"}, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := matchFrames(stack, tt.give); got != tt.want {
				t.Errorf("matchFrames(%q) = %d, want %d", tt.give, got, tt.want)
			}
		})
	}
}

func TestSignatureSite(t *testing.T) {
	frames := []stackcapture.Frame{
		{Function: "encoding/json.Unmarshal"},              // 0: the last matched frame
		{Function: "k8s.io/client-go/rest.Result.Into"},    // 1: a dependency's
		{Function: "example.com/op/internal/sync.(*S).Do"}, // 2: the main module's
		{Function: "main.main"},                            // 3
	}
	user := func(i int) bool { return i == 1 || i == 2 }
	tests := []struct {
		name     string
		mainPath string
		last     int
		want     int
	}{
		{"the main module first", "example.com/op", 0, 2},
		{"outward of the match only", "example.com/op", 2, 3},
		{"package main is the main module's", "example.com/other", 0, 3},
		{"else a dependency", "example.com/other", 3, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := signatureSite(frames, tt.last, tt.mainPath, user); got != tt.want {
				t.Errorf("signatureSite = %d, want %d", got, tt.want)
			}
		})
	}
	noMain := frames[:3]
	if got := signatureSite(noMain, 0, "example.com/other", user); got != 1 {
		t.Errorf("without the main module's frame: %d, want the dependency's, 1", got)
	}
}

func TestWithSignaturesValidates(t *testing.T) {
	many := make([]Signature, MaxSignatures+1)
	for i := range many {
		many[i] = Signature{Name: string(rune('A' + i)), Frames: []string{"f"}}
	}
	tests := []struct {
		name string
		give []Option
		want string
	}{
		{"no name", []Option{WithSignatures(Signature{Frames: []string{"f"}})}, "signature 0 has no name"},
		{"no frames", []Option{WithSignatures(Signature{Name: "a"})}, `signature "a" has no frames`},
		{"an empty frame", []Option{WithSignatures(Signature{Name: "a", Frames: []string{"f", ""}})}, `signature "a": frame 1 is empty`},
		{"duplicate names", []Option{WithSignatures(Signature{Name: "a", Frames: []string{"f"}}, Signature{Name: "a", Frames: []string{"g"}})},
			`two signatures are named "a"`},
		{"duplicate names across calls", []Option{WithSignatures(Signature{Name: "a", Frames: []string{"f"}}),
			WithSignatures(Signature{Name: "a", Frames: []string{"g"}})}, `two signatures are named "a"`},
		{"too many", []Option{WithSignatures(many...)}, "at most 32 signatures, got 33"},
		{"too many across calls", []Option{WithSignatures(many[:20]...), WithSignatures(many[20:]...)}, "at most 32 signatures, got 33"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.give...)
			var oe *OptionError
			if !errors.As(err, &oe) || !errors.Is(err, ErrInvalidOption) || oe.Option != "WithSignatures" || oe.Reason != tt.want {
				t.Errorf("New: %v, want WithSignatures: %s", err, tt.want)
			}
		})
	}
	if _, err := New(WithSignatures(many[:MaxSignatures]...)); err != nil {
		t.Errorf("%d signatures: %v", MaxSignatures, err)
	}
	// The same signatures given twice count once (the probe adds the
	// operator signatures, and a user may too).
	if _, err := New(WithSignatures(many[:MaxSignatures]...), WithSignatures(many[:MaxSignatures]...)); err != nil {
		t.Errorf("the same %d signatures twice: %v", MaxSignatures, err)
	}
	// The option keeps its own copy.
	sig := Signature{Name: "a", Frames: []string{"f"}}
	o := WithSignatures(sig)
	sig.Frames[0] = ""
	if _, err := New(o); err != nil {
		t.Errorf("the caller's later change reached the option: %v", err)
	}
}
