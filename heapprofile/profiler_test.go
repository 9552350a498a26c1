package heapprofile

import (
	"errors"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gcprobe/probe/internal/testkit"
)

// publish makes the runtime publish the allocations made so far: the heap
// profile is as of the latest completed GC cycle, and an allocation shows
// in it two cycles after it was made.
func publish() {
	runtime.GC()
	runtime.GC()
}

var sink []byte

// churn allocates n bytes in 4 KiB objects at one line, keeping none.
//
//go:noinline
func churn(n int) {
	for range n / 4096 {
		sink = make([]byte, 4096) // marker: churn
	}
}

// churnSizes allocates n bytes at one line in objects of seven sizes,
// keeping none: one stack, seven records of the runtime's profile.
//
//go:noinline
func churnSizes(n int) {
	sizes := [...]int{1 << 10, 2 << 10, 4 << 10, 8 << 10, 16 << 10, 32 << 10, 64 << 10}
	for i := 0; n > 0; i++ {
		sz := sizes[i%len(sizes)]
		sink = make([]byte, sz) // marker: churn-sizes
		n -= sz
	}
}

var cache [][]byte

// grow keeps n more bytes in 256 KiB objects at one line.
//
//go:noinline
func grow(n int) {
	for range n / (256 << 10) {
		cache = append(cache, make([]byte, 256<<10)) // marker: grow
	}
}

// clock is a manual clock for the window lengths.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newProfiler(t *testing.T, opts ...Option) (*Profiler, *clock) {
	t.Helper()
	c := &clock{t: time.Unix(1000, 0)}
	p, err := New(append([]Option{WithClock(c.now)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return p, c
}

func isLine(s Site, file string, line int) bool {
	return filepath.Base(s.Frame.File) == file && s.Frame.Line == line
}

func TestAllocationLoopIsNamed(t *testing.T) {
	line := testkit.MarkerLine(t, "profiler_test.go", "churn")
	p, c := newProfiler(t)
	publish()
	p.Sample() // the baseline
	for w := 1; w <= 3; w++ {
		churn(64 << 20)
		publish()
		c.t = c.t.Add(10 * time.Second)
		p.Sample()
		sn := p.Snapshot()
		if len(sn.Allocating) > 0 && isLine(sn.Allocating[0], "profiler_test.go", line) {
			top := sn.Allocating[0]
			// 64 MiB over 10 s, estimated from about 128 samples.
			if top.AllocBytes < 32<<20 || top.AllocBytes > 128<<20 {
				t.Errorf("window %d: %d bytes allocated at the loop, want about 64 MiB", w, top.AllocBytes)
			}
			if r := top.AllocBytesPerSecond; r < 3.2*(1<<20) || r > 12.8*(1<<20) {
				t.Errorf("window %d: %.0f B/s, want about 6.4 MiB/s", w, r)
			}
			if !strings.HasSuffix(top.Frame.Function, "heapprofile.churn") || len(top.Stack) < 2 ||
				top.Stack[0].Line != line || !strings.Contains(top.Stack[1].Function, "heapprofile.Test") {
				// A test's: the stack is the first the process's profile
				// holds through the line, another test's under -count.
				t.Errorf("site %v, stack %v: want churn's line, then a test", top.Frame, top.Stack)
			}
			for _, s := range sn.Growing {
				if isLine(s, "profiler_test.go", line) {
					t.Errorf("the loop keeps nothing, yet it is growing: %+v", s)
				}
			}
			return
		}
	}
	t.Fatalf("the loop at line %d was not the top allocating site within three windows: %+v", line, p.Snapshot().Allocating)
}

// A line that allocates objects of several sizes has one record per size
// in the runtime's profile, all with its stack: each window counts them
// all, once, and nothing turns negative.
func TestOneLineManySizes(t *testing.T) {
	line := testkit.MarkerLine(t, "profiler_test.go", "churn-sizes")
	p, c := newProfiler(t)
	publish()
	p.Sample() // the baseline
	for w := 1; w <= 3; w++ {
		churnSizes(64 << 20)
		publish()
		c.t = c.t.Add(10 * time.Second)
		p.Sample()
		sn := p.Snapshot()
		if sn.TotalAllocBytes < 32<<20 {
			t.Errorf("window %d: the whole profile allocated %d bytes, want at least the line's 64 MiB, about", w, sn.TotalAllocBytes)
		}
		if len(sn.Allocating) == 0 || !isLine(sn.Allocating[0], "profiler_test.go", line) {
			t.Fatalf("window %d: the line is not the top allocating site: %+v", w, sn.Allocating)
		}
		if b := sn.Allocating[0].AllocBytes; b < 32<<20 || b > 128<<20 {
			t.Errorf("window %d: %d bytes at the line, want about 64 MiB", w, b)
		}
	}
}

func TestGrowingCacheIsNamed(t *testing.T) {
	line := testkit.MarkerLine(t, "profiler_test.go", "grow")
	t.Cleanup(func() { cache = nil })
	p, c := newProfiler(t)
	publish()
	p.Sample()
	for w := 1; w <= 3; w++ {
		grow(8 << 20)
		churn(8 << 20) // and some churn, which must not count as growth
		publish()
		c.t = c.t.Add(10 * time.Second)
		p.Sample()
		sn := p.Snapshot()
		if w < DefaultGrowingWindows {
			if len(sn.Growing) > 0 {
				t.Fatalf("window %d: growing after fewer than %d windows: %+v", w, DefaultGrowingWindows, sn.Growing)
			}
			continue
		}
		if len(sn.Growing) == 0 || !isLine(sn.Growing[0], "profiler_test.go", line) {
			t.Fatalf("window %d: growing sites %+v, want the cache's line %d first", w, sn.Growing, line)
		}
		g := sn.Growing[0]
		if g.GrowingFor != 3 || g.GrownBytes < 12<<20 || g.InUseBytes < 12<<20 {
			t.Errorf("growing for %d windows, grown %d, in use %d: want 3 windows, about 24 MiB", g.GrowingFor, g.GrownBytes, g.InUseBytes)
		}
		for _, s := range sn.Growing {
			if isLine(s, "profiler_test.go", testkit.MarkerLine(t, "profiler_test.go", "churn")) {
				t.Errorf("the churn is growing: %+v", s)
			}
		}
	}
}

func TestSteadyProgramGrowsNothing(t *testing.T) {
	p, c := newProfiler(t)
	publish()
	p.Sample()
	// A steady working set, 4 MiB kept from the start, and 4 MiB of
	// garbage every window. (A working set replaced every window is not
	// steady in the profile: its in-use bytes are a fresh sample of 16
	// allocations at MemProfileRate each window, and three rises in a row
	// by chance fail the test about once in five runs.)
	var held [][]byte
	for range 16 {
		held = append(held, make([]byte, 256<<10))
	}
	for w := 1; w <= 6; w++ {
		churn(4 << 20)
		publish()
		c.t = c.t.Add(10 * time.Second)
		p.Sample()
		if g := p.Snapshot().Growing; len(g) > 0 {
			t.Fatalf("window %d: a steady program has growing sites: %+v", w, g)
		}
	}
	runtime.KeepAlive(held)
}

func TestBucketBound(t *testing.T) {
	p, _ := newProfiler(t, WithMaxBuckets(1))
	p.Sample()
	sn := p.Snapshot()
	if sn.Skipped != 1 || sn.Reads != 0 || cap(p.records) > 1 || sn.Status != StatusOverflow || sn.Bound != 1 || sn.Ceiling != BoundCeiling {
		t.Fatalf("over the bound: skipped %d, reads %d, records cap %d, status %v, bound %d of %d",
			sn.Skipped, sn.Reads, cap(p.records), sn.Status, sn.Bound, sn.Ceiling)
	}
}

func TestNoCycleNoWindow(t *testing.T) {
	line := testkit.MarkerLine(t, "profiler_test.go", "churn")
	p, c := newProfiler(t)
	var cycle uint64 = 1
	p.cycles = func() uint64 { return cycle }
	publish()
	p.Sample()
	churn(32 << 20)
	publish()
	c.t = c.t.Add(time.Second)
	p.Sample() // the runtime's count says no cycle ended: nothing read
	if sn := p.Snapshot(); sn.Reads != 1 || sn.Unchanged != 1 || len(sn.Allocating) != 0 {
		t.Fatalf("a read without a cycle changed the picture: %+v", sn)
	}
	cycle++
	c.t = c.t.Add(time.Second)
	p.Sample()
	sn := p.Snapshot()
	if sn.Window != 2*time.Second || len(sn.Allocating) == 0 || !isLine(sn.Allocating[0], "profiler_test.go", line) {
		t.Fatalf("the window did not extend over the read without a cycle: window %v, %+v", sn.Window, sn.Allocating)
	}
}

func TestScale(t *testing.T) {
	tests := []struct {
		name        string
		objs, bytes int64
		rate        int
		want        float64
	}{
		{"every allocation recorded", 10, 100, 1, 1},
		{"objects the size of the rate", 1, 512 << 10, 512 << 10, 1 / (1 - 0.36787944117144233)},
		{"small objects", 1000, 16000, 512 << 10, 32769}, // 1/(1-exp(-16/524288)) ≈ 524288/16
		{"nothing", 0, 0, 512 << 10, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := scale(tt.objs, tt.bytes, tt.rate)
			if d := got/tt.want - 1; d > 0.001 || d < -0.001 {
				t.Errorf("scale = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestOptions(t *testing.T) {
	for _, o := range []Option{nil, WithInterval(time.Millisecond), WithMaxBuckets(0), WithTopK(0), WithTopK(MaxTopK + 1),
		WithGrowing(0, 1), WithGrowing(1, 0), WithClock(nil)} {
		if _, err := New(o); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("New accepted a bad option: %v", err)
		}
	}
}

func TestStartStop(t *testing.T) {
	p, err := New(WithInterval(MinInterval))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); !errors.Is(err, ErrRunning) {
		t.Fatalf("second Start: %v", err)
	}
	testkit.Poll(t, 10*time.Second, "two reads", func() bool { sn := p.Snapshot(); return sn.Reads+sn.Unchanged >= 2 })
	p.Stop()
	p.Stop()
	if err := p.Start(); !errors.Is(err, ErrStopped) {
		t.Fatalf("Start after Stop: %v", err)
	}
}

func TestSinceMark(t *testing.T) {
	line := testkit.MarkerLine(t, "profiler_test.go", "churn")
	p, c := newProfiler(t)
	publish()
	p.Sample()
	churn(256 << 20) // before the mark: not Since's
	publish()
	c.t = c.t.Add(time.Second)
	p.Sample()
	m := p.Mark()
	if !m.Time().Equal(c.t) {
		t.Fatalf("mark at %v, want the latest read's time %v", m.Time(), c.t)
	}
	if sn := p.Since(m); sn.Window != 0 || len(sn.Allocating) != 0 {
		t.Fatalf("no read since the mark, yet window %v, %d sites", sn.Window, len(sn.Allocating))
	}
	for range 3 { // three windows after the mark, 64 MiB each
		churn(64 << 20)
		publish()
		c.t = c.t.Add(time.Second)
		p.Sample()
	}
	sn := p.Since(m)
	if sn.Window != 3*time.Second {
		t.Fatalf("window %v, want 3s", sn.Window)
	}
	var got *Site
	for i := range sn.Allocating {
		if isLine(sn.Allocating[i], "profiler_test.go", line) {
			got = &sn.Allocating[i]
		}
	}
	if got == nil {
		t.Fatalf("the churn line is missing since the mark: %+v", sn.Allocating)
	}
	// Estimates: the 192 MiB made since the mark, give or take sampling,
	// and far from the 448 MiB made since the first read. At the default
	// MemProfileRate (512 KiB) about 384 of the 4 KiB objects are sampled,
	// each standing for 512 KiB: a Poisson count whose standard deviation
	// is 5 %; the bounds are four of them. (With 48 MiB, 96 samples and
	// bounds of ±17 %, one run in ten failed.)
	if got.AllocBytes < 154<<20 || got.AllocBytes > 230<<20 {
		t.Fatalf("allocated since the mark %d bytes, want about %d", got.AllocBytes, 192<<20)
	}
	// The latest window alone: about 64 MiB (128 samples, 9 % each way).
	if last := p.Snapshot(); len(last.Allocating) == 0 || last.Allocating[0].AllocBytes > 128<<20 {
		t.Fatalf("Since changed the latest window's figures: %+v", last.Allocating)
	}
}
