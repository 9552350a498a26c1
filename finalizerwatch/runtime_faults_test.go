package finalizerwatch

import (
	"fmt"
	"net"
	"os"
	"reflect"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gcprobe/probe/internal/testkit"
)

// Faults of the runtime build mode found by an adversarial run, each
// with the scenario that showed it. Like runtime_test.go, these run only
// in a binary built in the mode (scripts/runtime-mode-tests.sh).

// rtSites reads Default's ledger and returns its sites by the last element
// of their function's name (rtFaultDrop, not finalizerwatch.rtFaultDrop).
func rtSites() map[string]SiteStats {
	var sn Snapshot
	Default.Read(&sn, ReadOptions{TopK: -1, Fresh: true})
	out := map[string]SiteStats{}
	for _, k := range sn.Kinds {
		for _, s := range k.Top {
			if i := strings.LastIndexByte(s.Site.Function, '.'); i >= 0 {
				out[s.Site.Function[i+1:]] = s
			}
		}
	}
	return out
}

// attachDefault skips t outside the runtime build mode, and attaches
// Default to the runtime until t ends.
func attachDefault(t *testing.T) {
	t.Helper()
	needRuntimeMode(t)
	detach, err := Default.AttachRuntime()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(detach)
}

type rtFaultObj struct{ _ [32]byte }

//go:noinline
func rtFaultSetFinalizers(n int, ran *atomic.Int64) []*rtFaultObj {
	objs := make([]*rtFaultObj, n)
	for i := range objs {
		objs[i] = new(rtFaultObj)
		runtime.SetFinalizer(objs[i], func(*rtFaultObj) { ran.Add(1) })
	}
	return objs
}

//go:noinline
func rtFaultAddCleanups(n int, ran *atomic.Int64) []*rtFaultObj {
	objs := make([]*rtFaultObj, n)
	for i := range objs {
		objs[i] = new(rtFaultObj)
		runtime.AddCleanup(objs[i], func(*atomic.Int64) { ran.Add(1) }, ran)
	}
	return objs
}

//go:noinline
func rtFaultStoppedCleanups(n int) []runtime.Cleanup {
	out := make([]runtime.Cleanup, n)
	for i := range out {
		out[i] = runtime.AddCleanup(new(rtFaultObj), func(int) {}, i)
	}
	return out
}

//go:noinline
func rtFaultOpen(t *testing.T) *os.File {
	f, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestRuntimeModeCountsAcrossDetach: what was counted while attached is
// still counted when it runs, is cleared or is stopped while detached, so
// that a probe started again reads exact counts: 1 000 finalizers and
// 1 000 cleanups registered while attached and run while detached are
// executed, not outstanding suspects forever; a file opened while attached
// and closed while detached is cleared; cleanups stopped while detached
// are cleared. (The probe's Stop detaches; its Start attaches.)
func TestRuntimeModeCountsAcrossDetach(t *testing.T) {
	needRuntimeMode(t)
	detach, err := Default.AttachRuntime()
	if err != nil {
		t.Fatal(err)
	}
	const n = 1000
	var finRan, cleanRan atomic.Int64
	fins := rtFaultSetFinalizers(n, &finRan)
	cleans := rtFaultAddCleanups(n, &cleanRan)
	stops := rtFaultStoppedCleanups(n)
	f := rtFaultOpen(t)
	detach()

	// Detached: everything counted above ends now.
	runtime.KeepAlive(fins)
	runtime.KeepAlive(cleans)
	fins, cleans = nil, nil
	for _, c := range stops {
		c.Stop()
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	testkit.AwaitGC(t, 30*time.Second, "every finalizer and cleanup to run", func() bool {
		return finRan.Load() == n && cleanRan.Load() == n
	})
	// Registrations while detached are not counted.
	_ = rtFaultSetFinalizers(10, &finRan)

	// Attached again, as a second probe.Start does.
	detach, err = Default.AttachRuntime()
	if err != nil {
		t.Fatal(err)
	}
	defer detach()
	for range 3 {
		runtime.GC()
	}
	sites := rtSites()
	for _, c := range []struct {
		name                  string
		reg, exec, clr, outst uint64
	}{
		{"rtFaultSetFinalizers", n, n, 0, 0},
		{"rtFaultAddCleanups", n, n, 0, 0},
		{"rtFaultStoppedCleanups", n, 0, n, 0},
		{"rtFaultOpen", 1, 0, 1, 0},
	} {
		s, ok := sites[c.name]
		if !ok {
			t.Errorf("%s: no site in the ledger", c.name)
			continue
		}
		if s.Registered != c.reg || s.Executed != c.exec || s.Cleared != c.clr || s.Outstanding != c.outst || s.Suspect != 0 {
			t.Errorf("%s: registered %d executed %d cleared %d outstanding %d suspect %d (class %s); want %d %d %d %d 0",
				c.name, s.Registered, s.Executed, s.Cleared, s.Outstanding, s.Suspect, s.Class, c.reg, c.exec, c.clr, c.outst)
		}
	}
}

//go:noinline
func rtFaultReflectSet(n int, ran *atomic.Int64) {
	set := reflect.ValueOf(runtime.SetFinalizer)
	fin := reflect.ValueOf(func(*rtFaultObj) { ran.Add(1) })
	for range n {
		set.Call([]reflect.Value{reflect.ValueOf(new(rtFaultObj)), fin})
	}
}

// TestRuntimeModeReflectiveRegistration: runtime.SetFinalizer called
// through reflect.Value.Call, whose return PC is in the runtime's
// assembly trampoline (runtime.call32), is counted at the line that made
// the reflective call, and its runs too.
func TestRuntimeModeReflectiveRegistration(t *testing.T) {
	attachDefault(t)
	const n = 100
	var ran atomic.Int64
	rtFaultReflectSet(n, &ran)
	var last string
	t.Cleanup(func() {
		if t.Failed() {
			t.Log("last seen: " + last)
		}
	})
	testkit.AwaitGC(t, 30*time.Second, "the reflective registrations to be counted and run", func() bool {
		s := rtSites()["rtFaultReflectSet"]
		last = fmt.Sprintf("ran %d; ledger %+v", ran.Load(), s.Counts)
		return ran.Load() == n && s.Registered == n && s.Executed == n
	})
}

// rtFaultHuge is an object whose finalizer returns 64 KiB: more than the
// low bits of the runtime's nret word hold exactly.
type rtFaultHuge struct{ _ [16]byte }

//go:noinline
func rtFaultHugeResults(n int, ran *atomic.Int64) {
	for range n {
		runtime.SetFinalizer(new(rtFaultHuge), func(*rtFaultHuge) (r [1 << 16]byte) {
			ran.Add(1)
			r[len(r)-1] = 1
			return r
		})
	}
}

//go:noinline
func rtFaultHugeCleared(n int) {
	for range n {
		o := new(rtFaultHuge)
		runtime.SetFinalizer(o, func(*rtFaultHuge) (r [3<<16 + 8]byte) { return r })
		runtime.SetFinalizer(o, nil)
	}
}

// TestRuntimeModeHugeResults: a finalizer whose results are larger than
// 64 KiB is counted, registered and run, or cleared, like any other.
func TestRuntimeModeHugeResults(t *testing.T) {
	attachDefault(t)
	const n = 50
	var ran atomic.Int64
	rtFaultHugeResults(n, &ran)
	rtFaultHugeCleared(n)
	var last string
	t.Cleanup(func() {
		if t.Failed() {
			t.Log("last seen: " + last)
		}
	})
	testkit.AwaitGC(t, 30*time.Second, "the finalizers with 64 KiB results to be counted and run", func() bool {
		sites := rtSites()
		s, c := sites["rtFaultHugeResults"], sites["rtFaultHugeCleared"]
		last = fmt.Sprintf("ran %d; ledger %+v; cleared site %+v", ran.Load(), s.Counts, c.Counts)
		return ran.Load() == n && s.Registered == n && s.Executed == n && c.Registered == n && c.Cleared == n
	})
}

//go:noinline
func rtFaultListen(t *testing.T, n int) {
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0") // dropped without Close
		if err != nil {
			t.Fatal(err)
		}
		_ = ln
	}
}

// TestRuntimeModeNamesTheDroppedResource: listeners dropped at one line
// are named net.Listener, though the line's first net.Listen also opens
// (and closes) a file, /proc/sys/net/core/somaxconn, whose entry is kept
// apart from theirs.
func TestRuntimeModeNamesTheDroppedResource(t *testing.T) {
	attachDefault(t)
	const n = 30
	rtFaultListen(t, n)
	var last SiteStats
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("last seen: %+v", last)
		}
	})
	testkit.AwaitGC(t, 30*time.Second, "the dropped listeners to be counted", func() bool {
		last = rtSites()["rtFaultListen"]
		return last.Dropped >= n
	})
	if last.Resource != "net.Listener" || last.Dropped != n {
		t.Errorf("the line that dropped %d listeners reads %d %q, want %d net.Listener", n, last.Dropped, last.Resource, n)
	}
}
