package heapprofile

import (
	"strings"
	"testing"
	"time"
)

// allocate adds allocations of one 64 MiB object to every stack of f.
func (f *fakeProfile) allocate() {
	for i := range f.recs {
		f.recs[i].AllocObjects++
		f.recs[i].AllocBytes += 64 << 20
	}
}

// addStacks adds n distinct stacks through userPCs' line.
func (f *fakeProfile) addStacks(n int) {
	user := userPCs()
	for range n {
		f.add(append(user[:len(user):len(user)], uintptr(len(f.recs)+1)), 1, 64<<20, 1)
	}
}

func TestProfilingOff(t *testing.T) {
	f := &fakeProfile{}
	f.addStacks(1)
	p, c := fakeProfiler(t, f)
	rate := 512 << 10
	p.rate = func() int { return rate }
	if sn := p.Snapshot(); sn.Status != StatusUnread || sn.StatusText() == "" {
		t.Fatalf("before a read: %v %q", sn.Status, sn.StatusText())
	}
	p.Sample()
	f.allocate()
	c.t = c.t.Add(10 * time.Second)
	p.Sample()
	if sn := p.Snapshot(); sn.Status != StatusOK || sn.StatusText() != "" || len(sn.Allocating) != 1 {
		t.Fatalf("profile on: status %v %q, %d sites", sn.Status, sn.StatusText(), len(sn.Allocating))
	}

	rate = 0 // runtime.MemProfileRate = 0
	c.t = c.t.Add(10 * time.Second)
	p.Sample()
	sn := p.Snapshot()
	if sn.Status != StatusOff || sn.Rate != 0 || len(sn.Allocating)+len(sn.Growing) != 0 || sn.Window != 0 {
		t.Fatalf("profile off: status %v, rate %d, lists %+v %+v, window %v: want off and the old window's lists gone",
			sn.Status, sn.Rate, sn.Allocating, sn.Growing, sn.Window)
	}
	if got, want := sn.StatusText(), "the heap profile is off (runtime.MemProfileRate = 0): no allocating line can be named"; got != want {
		t.Errorf("StatusText() = %q, want %q", got, want)
	}

	rate = 512 << 10
	f.allocate()
	c.t = c.t.Add(10 * time.Second)
	p.Sample()
	if sn := p.Snapshot(); sn.Status != StatusOK || len(sn.Allocating) != 1 || sn.Window != 20*time.Second {
		t.Fatalf("profile on again: status %v, %d sites, window %v", sn.Status, len(sn.Allocating), sn.Window)
	}
}

func TestOverflowIsSaidAndRecovered(t *testing.T) {
	f := &fakeProfile{}
	f.addStacks(3)
	p, c := fakeProfiler(t, f, WithMaxBuckets(4))
	step := func() Snapshot {
		f.allocate()
		c.t = c.t.Add(10 * time.Second)
		p.Sample()
		return p.Snapshot()
	}
	p.Sample()
	if sn := step(); sn.Status != StatusOK || len(sn.Allocating) != 1 || sn.Bound != 4 || sn.Ceiling != 16 {
		t.Fatalf("3 buckets of 4: status %v, sites %d, bound %d of %d", sn.Status, len(sn.Allocating), sn.Bound, sn.Ceiling)
	}

	f.addStacks(3) // 6 buckets: over the bound of 4
	sn := step()
	if sn.Status != StatusOverflow || sn.Buckets != 6 || sn.Bound != 4 || sn.Skipped != 1 || len(sn.Allocating)+len(sn.Growing) != 0 {
		t.Fatalf("6 buckets of 4: status %v, buckets %d, bound %d, skipped %d, lists %+v %+v: want overflow and no stale list",
			sn.Status, sn.Buckets, sn.Bound, sn.Skipped, sn.Allocating, sn.Growing)
	}
	if txt := sn.StatusText(); !strings.Contains(txt, "6 buckets") || !strings.Contains(txt, "bound of 4") {
		t.Errorf("StatusText() = %q, want the buckets and the bound", txt)
	}

	// Recovered: the bound doubled, and the window covers the read that
	// overflowed too.
	sn = step()
	if sn.Status != StatusOK || sn.Bound != 8 || sn.Buckets != 6 || len(sn.Allocating) != 1 || sn.Window != 20*time.Second {
		t.Fatalf("recovery: status %v, bound %d, buckets %d, sites %d, window %v", sn.Status, sn.Bound, sn.Buckets, len(sn.Allocating), sn.Window)
	}
	// The 3 old stacks allocated twice since their last read, the 3 new
	// ones 3 times since they began: 15 objects of 64 MiB.
	if got := sn.Allocating[0].AllocBytes; got != 15*64<<20 {
		t.Errorf("allocated %d MiB over the window, want %d", got>>20, 15*64)
	}

	f.addStacks(14) // 20 buckets: past the ceiling of 16
	for i, want := range []int{8, 16, 16} {
		sn = step()
		if sn.Status != StatusOverflow || sn.Buckets != 20 || sn.Bound != want || len(sn.Allocating) != 0 {
			t.Fatalf("20 buckets, read %d: status %v, buckets %d, bound %d (want %d), %d sites", i, sn.Status, sn.Buckets, sn.Bound, want, len(sn.Allocating))
		}
	}
	if txt := sn.StatusText(); !strings.Contains(txt, "20 buckets") || !strings.Contains(txt, "ceiling of 16") {
		t.Errorf("StatusText() = %q, want the buckets and the ceiling", txt)
	}
	if cap(p.records) > 16 {
		t.Errorf("records cap %d past the ceiling", cap(p.records))
	}
}

func TestRaise(t *testing.T) {
	tests := []struct {
		name                    string
		bound, n, ceiling, want int
	}{
		{"double", 4, 6, 16, 8},
		{"double twice", 4, 14, 16, 16},
		{"up to the ceiling", 4, 100, 16, 16},
		{"at the ceiling", 16, 100, 16, 16},
		{"odd ceiling", 5, 100, 20, 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := raise(tt.bound, tt.n, tt.ceiling); got != tt.want {
				t.Errorf("raise(%d, %d, %d) = %d, want %d", tt.bound, tt.n, tt.ceiling, got, tt.want)
			}
		})
	}
}
