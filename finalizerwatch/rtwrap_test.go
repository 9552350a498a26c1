package finalizerwatch

import (
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gcprobe/probe/internal/testkit"
)

// fileOpener is an fs.FS-like interface; diskFiles forwards to os.Open in
// one line, as a filesystem wrapper does.
type fileOpener interface {
	Open(name string) (*os.File, error)
}

type diskFiles struct{}

func (diskFiles) Open(name string) (*os.File, error) { return os.Open(name) }

var rtOpener fileOpener = diskFiles{}

//go:noinline
func rtWrapKeep(kept *[]*os.File) {
	f, err := rtOpener.Open(os.Args[0])
	if err == nil {
		*kept = append(*kept, f)
	}
}

//go:noinline
func rtWrapDrop() {
	f, _ := rtOpener.Open(os.Args[0])
	_ = f // dropped without Close
}

// In the runtime build mode, a filesystem wrapper with two callers is
// looked through: the files one caller drops without Close are Dropped at
// its line, and the other's, kept and closed, are not.
func TestRuntimeModeWrapperDroppedAtCaller(t *testing.T) {
	attachDefault(t)
	var kept []*os.File
	t.Cleanup(func() {
		for _, f := range kept {
			f.Close()
		}
	})
	// The wrapper's first file is the keeping caller's; the first of
	// the next cycle the dropping caller's.
	rtWrapKeep(&kept)
	c := Default.cycleCount(KindFinalizer)
	testkit.Poll(t, 30*time.Second, "a GC cycle", func() bool { runtime.GC(); return Default.cycleCount(KindFinalizer) > c })
	rtWrapDrop()
	const n = 20
	for range n {
		rtWrapKeep(&kept)
		rtWrapDrop()
	}
	var keep, drop SiteStats
	testkit.Poll(t, 30*time.Second, "the dropped files to be counted at their caller", func() bool {
		runtime.GC()
		s := rtSites()
		keep, drop = s["rtWrapKeep"], s["rtWrapDrop"]
		return drop.Dropped >= n
	})
	if drop.Dropped != n || drop.Resource != "os.File" {
		t.Errorf("dropping caller: %d %q dropped, want %d os.File", drop.Dropped, drop.Resource, n)
	}
	if keep.Registered != n || keep.Dropped != 0 || keep.Outstanding != n {
		t.Errorf("keeping caller: %+v, want %d registered and outstanding, 0 dropped", keep.Counts, n)
	}
	if w := rtSites()["Open"]; w.Registered != 2 {
		t.Errorf("the wrapper's own entry: %+v, want the 2 files opened before its second caller was seen", w.Counts)
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
	testkit.Poll(t, 30*time.Second, "the dropped files counted, the cache stable", func() bool {
		runtime.GC()
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
