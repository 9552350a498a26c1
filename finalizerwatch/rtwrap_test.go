package finalizerwatch

import (
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gcprobe/probe/internal/testkit"
)

// fileOpener is an fs.FS-like interface. diskFiles forwards to os.Open
// in a one-line method, as Caddy's OsFS does; lockedFiles in a method of
// a few lines, as a lock helper does.
type fileOpener interface {
	Open(name string) (*os.File, error)
}

type diskFiles struct{}

func (diskFiles) Open(name string) (*os.File, error) { return os.Open(name) }

type lockedFiles struct{}

func (lockedFiles) Open(name string) (*os.File, error) {
	f, err := os.Open(name)
	return f, err
}

var rtOpeners = map[string]fileOpener{"one-line": diskFiles{}, "multi-line": lockedFiles{}}

//go:noinline
func rtWrapKeep(o fileOpener, kept *[]*os.File) {
	f, err := o.Open(os.Args[0])
	if err == nil {
		*kept = append(*kept, f)
	}
}

//go:noinline
func rtWrapDrop(o fileOpener) {
	f, _ := o.Open(os.Args[0])
	_ = f // dropped without Close
}

// In the runtime build mode, a filesystem wrapper is looked through: the
// files one caller drops without Close are Dropped at its line, and the
// other's, kept, are not. A one-line forwarder is looked through from its
// first file; one of a few lines once the ledger has seen its second
// caller (it keeps the files opened before).
func TestRuntimeModeWrapperDroppedAtCaller(t *testing.T) {
	attachDefault(t)
	for _, name := range []string{"one-line", "multi-line"} {
		t.Run(name, func(t *testing.T) {
			o := rtOpeners[name]
			var kept []*os.File
			t.Cleanup(func() {
				for _, f := range kept {
					f.Close()
				}
			})
			before := rtSites()
			// The wrapper's first file is the keeping caller's; the first
			// of the next cycle the dropping caller's.
			rtWrapKeep(o, &kept)
			c := Default.cycleCount(KindFinalizer)
			testkit.AwaitGC(t, 30*time.Second, "a GC cycle", func() bool { return Default.cycleCount(KindFinalizer) > c })
			rtWrapDrop(o)
			const n = 20
			for range n {
				rtWrapKeep(o, &kept)
				rtWrapDrop(o)
			}
			want := uint64(n + 1) // one-line: every file at its caller
			wrapper := uint64(0)
			if name == "multi-line" {
				want, wrapper = n, 2
			}
			var keep, drop SiteStats
			testkit.AwaitGC(t, 30*time.Second, "the dropped files to be counted at their caller", func() bool {
				s := rtSites()
				keep, drop = s["rtWrapKeep"], s["rtWrapDrop"]
				return drop.Dropped-before["rtWrapDrop"].Dropped >= want
			})
			if got := drop.Dropped - before["rtWrapDrop"].Dropped; got != want || drop.Resource != "os.File" {
				t.Errorf("dropping caller: %d %q dropped, want %d os.File", got, drop.Resource, want)
			}
			if got := keep.Registered - before["rtWrapKeep"].Registered; got != want || keep.Dropped != 0 {
				t.Errorf("keeping caller: %d registered, %d dropped; want %d registered, 0 dropped", got, keep.Dropped, want)
			}
			if w := rtSites()["Open"]; name == "multi-line" && w.Registered != wrapper {
				t.Errorf("the wrapper's own entry: %+v, want the %d files opened before its second caller was seen", w.Counts, wrapper)
			}
		})
	}
}

//go:noinline
func rtRankCache(n int) []*rtObj {
	objs := make([]*rtObj, n)
	for i := range objs {
		objs[i] = new(rtObj)
		runtime.SetFinalizer(objs[i], func(*rtObj) {})
	}
	return objs
}

//go:noinline
func rtRankDrop() {
	f, _ := os.Open(os.Args[0])
	_ = f // dropped without Close
}

// A line that dropped files without Close ranks as a leak: above a stable
// cache far bigger than it, though its finalizers ran and the growth
// model calls it churn.
func TestRuntimeModeDroppedRanksAsLeak(t *testing.T) {
	attachDefault(t)
	cache := rtRankCache(2000)
	for range 3 {
		rtRankDrop()
	}
	var top []SiteStats
	testkit.AwaitGC(t, 30*time.Second, "the dropped files counted, the cache stable", func() bool {
		var sn Snapshot
		Default.Read(&sn, ReadOptions{TopK: -1, Fresh: true})
		top = sn.Kinds[KindFinalizer].Top
		s := rtSites()
		return s["rtRankDrop"].Dropped == 3 && s["rtRankCache"].Class == ClassStable
	})
	drop, cacheAt := -1, -1
	for i, s := range top {
		switch {
		case strings.HasSuffix(s.Site.Function, ".rtRankDrop"):
			drop = i
		case strings.HasSuffix(s.Site.Function, ".rtRankCache"):
			cacheAt = i
		}
	}
	if drop < 0 || cacheAt < 0 || drop > cacheAt {
		t.Errorf("the dropping line ranks %d, the stable cache %d: want the dropping line first", drop, cacheAt)
	}
	runtime.KeepAlive(cache)
}
