package pprofexporter

import (
	"io"
	"testing"

	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/internal/ledgertest"

	"github.com/gcprobe/probe/internal/testkit"
)

// ledgerOf returns a watcher whose ledger has n entries (distinct stacks
// of one site), their objects kept alive until the benchmark (or test)
// ends.
func ledgerOf(b testing.TB, n int) *finalizerwatch.Watcher {
	b.Helper()
	w, err := finalizerwatch.New(finalizerwatch.WithFullStacks(true),
		finalizerwatch.WithMaxSites(2*n), finalizerwatch.WithMaxStacks(2*n))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(w.Close)
	objs := make([]*obj, 0, n)
	b.Cleanup(func() { objs = nil })
	depth := 1
	for 1<<depth < n {
		depth++
	}
	for path := range uint(n) {
		testkit.AtPath(path, depth, func() {
			o := new(obj)
			w.SetFinalizer(o, finalizeObj)
			objs = append(objs, o)
		})
	}
	if got := len(ledgertest.Entries(w)); got < n {
		b.Fatalf("%d ledger entries, want %d", got, n)
	}
	return w
}

// BenchmarkWrite1000 builds and encodes (gzip included) the profile of a
// ledger of 1000 entries.
func BenchmarkWrite1000(b *testing.B) {
	w := ledgerOf(b, 1000)
	b.ReportAllocs()
	for b.Loop() {
		if err := Write(io.Discard, w); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkProfile1000 makes it a *profile.Profile: built, encoded and
// decoded, without gzip.
func BenchmarkProfile1000(b *testing.B) {
	w := ledgerOf(b, 1000)
	b.ReportAllocs()
	for b.Loop() {
		Profile(w)
	}
}

// BenchmarkProfile10000 builds the profile of 10 000 entries (distinct
// stacks).
func BenchmarkProfile10000(b *testing.B) {
	w := ledgerOf(b, 10000)
	b.ReportAllocs()
	for b.Loop() {
		Profile(w)
	}
}

// BenchmarkWrite10000 builds and encodes it.
func BenchmarkWrite10000(b *testing.B) {
	w := ledgerOf(b, 10000)
	b.ReportAllocs()
	for b.Loop() {
		if err := Write(io.Discard, w); err != nil {
			b.Fatal(err)
		}
	}
}
