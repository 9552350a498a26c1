package heapprofile

import (
	"fmt"
	"runtime"
	"testing"
)

// BenchmarkRead measures one read of a heap profile of 1k, 10k and 100k
// buckets in steady state (every stack already known): the copy the
// runtime makes of its records, hashing each stack, finding its bucket and
// summing by site. The profile is synthetic (distinct stacks through one
// real allocating line, 8 frames deep), copied as runtime.MemProfile
// copies, so that the size is controlled. The signatures cases add four
// signatures, two of which every stack matches.
func BenchmarkRead(b *testing.B) {
	pc := make([]uintptr, 8)
	runtime.Callers(1, pc)
	sigs := []Signature{
		{Name: "bench", Frames: []string{"heapprofile.BenchmarkRead"}},
		{Name: "runner", Frames: []string{"heapprofile.BenchmarkRead", "testing.(*B)"}},
		{Name: "json", Frames: []string{"encoding/json.Unmarshal"}},
		{Name: "gob", Frames: []string{"encoding/gob.", "sync.(*Map)"}},
	}
	for _, c := range []struct {
		n    int
		sigs bool
	}{{1_000, false}, {10_000, false}, {100_000, false}, {10_000, true}, {100_000, true}} {
		n := c.n
		name := fmt.Sprintf("buckets=%d", n)
		opts := []Option{WithMaxBuckets(n)}
		if c.sigs {
			name += "/signatures=4"
			opts = append(opts, WithSignatures(sigs...))
		}
		b.Run(name, func(b *testing.B) {
			src := make([]runtime.MemProfileRecord, n)
			for i := range src {
				r := &src[i]
				copy(r.Stack0[:], pc)
				r.Stack0[7] = uintptr(i + 1) // distinct stacks, one site
				r.AllocBytes, r.AllocObjects = 4096*int64(i+1), int64(i+1)
				r.FreeBytes, r.FreeObjects = 4096*int64(i/2), int64(i/2)
			}
			p, err := New(opts...)
			if err != nil {
				b.Fatal(err)
			}
			p.read = func(dst []runtime.MemProfileRecord) (int, bool) {
				if len(dst) < len(src) {
					return len(src), false
				}
				copy(dst, src)
				return len(src), true
			}
			var cycle uint64
			p.cycles = func() uint64 { cycle++; return cycle } // a cycle before every read
			p.Sample()                                         // the baseline: every bucket and site made
			if c.sigs && p.Snapshot().Signatures[1].InUseBytes == 0 {
				b.Fatal("the stacks do not match the signatures")
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				for i := range src {
					src[i].AllocBytes += 4096
					src[i].AllocObjects++
				}
				p.Sample()
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/bucket")
		})
	}
}

// BenchmarkReadRuntime is one read of this process's own heap profile.
func BenchmarkReadRuntime(b *testing.B) {
	p, err := New()
	if err != nil {
		b.Fatal(err)
	}
	var cycle uint64
	p.cycles = func() uint64 { cycle++; return cycle } // read every time, cycle or not
	p.Sample()
	b.ReportAllocs()
	for range b.N {
		p.Sample()
	}
	b.ReportMetric(float64(p.Snapshot().Buckets), "buckets")
}
