package finalizerwatch

import (
	"runtime"
	"testing"
	"unsafe"
)

// memObj is what the memory test registers on.
type memObj struct {
	p *int
	_ [16]byte
}

func finalizeMemObj(*memObj) {}
func cleanupMemObj(int)      {}

// memStackBits is the recursion depth that tells the memory test's stacks
// apart: 2^14 > 10 000 distinct stacks, under stackcapture.MaxDepth.
const memStackBits = 14

// atMemStack calls fn below a recursion of depth frames, each entering the
// next through one of two call sites by one bit of id: distinct ids,
// distinct stacks (and so distinct ledger entries with full stacks).
//
//go:noinline
func atMemStack(id, depth int, fn func()) {
	if depth == 0 {
		fn()
		return
	}
	if id&1 == 0 {
		atMemStack(id>>1, depth-1, fn)
		return
	}
	atMemStack(id>>1, depth-1, fn)
}

// heapLive returns the bytes of live heap objects after a full GC.
func heapLive() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// ledgerBytesBound is the most heap that 10 000 ledger entries, each with
// its stack and its symbolized site, may take with the tables' indexes
// (limits of 20 000): about 5.1 MiB (535 bytes an entry) when it was set,
// 21 MiB before, when an entry took a 512-byte node, its stack a fixed
// 32-PC key besides its PCs, a symbolized stack kept all its frames, and
// the indexes were allocated whole up front.
const ledgerBytesBound = 7 << 20

// TestLedgerBytesPer10kEntries pins the memory a watcher holds for 10 000
// ledger entries: full stacks, each stack an entry of its own and interned
// in the stack table, every site symbolized by a ranking. The objects are
// cleared once registered, so that what remains is the ledger, not the
// address table.
func TestLedgerBytesPer10kEntries(t *testing.T) {
	const n = 10_000
	o := new(memObj)
	before := heapLive()
	w := newWatcher(t, WithMaxSites(2*n), WithMaxStacks(2*n), WithFullStacks(true))
	for i := range n {
		atMemStack(i, memStackBits, func() {
			if i%2 == 0 {
				w.SetFinalizer(o, finalizeMemObj)
				w.SetFinalizer(o, nil)
			} else {
				AddCleanupTo(w, o, cleanupMemObj, 0).Stop()
			}
		})
	}
	w.Rank()
	after := heapLive()
	if got := w.sites.Len(); got != n {
		t.Fatalf("%d ledger entries, want %d", got, n)
	}
	runtime.KeepAlive(w)
	runtime.KeepAlive(o)
	grown := int64(after) - int64(before)
	t.Logf("%d ledger entries: heap +%d KiB, %d bytes an entry", n, grown/1024, grown/n)
	if grown > ledgerBytesBound {
		t.Errorf("%d ledger entries take %d KiB of heap, want at most %d KiB", n, grown/1024, ledgerBytesBound/1024)
	}
}

// TestSiteNodeSize pins a ledger entry to a 352-byte block: the site
// table's node is the entry, its key and its hash (internal/bounded). The
// per-cycle counters (two lines of 16) took it from 256: 1 MB more at
// 10 000 sites, for two atomic adds fewer on every set and clear. The next
// size class is 384 bytes. A counter of something rare needs no room here:
// it is a row of Counters marked rare, kept in the entry's rare table.
func TestSiteNodeSize(t *testing.T) {
	node := unsafe.Sizeof(uint64(0)) + unsafe.Sizeof(siteKey{}) + unsafe.Sizeof(site{})
	if node > 352 {
		t.Errorf("a site table node is %d bytes (site %d, key %d), want at most 352", node, unsafe.Sizeof(site{}), unsafe.Sizeof(siteKey{}))
	}
}

// TestSiteLayout pins the site's fields to the cache lines of its table
// node that the comment on site assigns them (its lines start at the
// node's offsets 0, 64, 128, ...): the callbacks' side must not touch the
// lines the registrations write, the first of which also holds the node's
// hash and key (internal/bounded's node: hash, key, value).
func TestSiteLayout(t *testing.T) {
	var s site
	base := unsafe.Sizeof(uint64(0)) + unsafe.Sizeof(siteKey{}) // the site's offset in its node
	lines := []struct {
		name   string
		fields map[string][2]uintptr // offset in the site, size
	}{
		{"registrations'", map[string][2]uintptr{
			"stack":    {unsafe.Offsetof(s.stack), unsafe.Sizeof(s.stack)},
			"checked":  {unsafe.Offsetof(s.checked), unsafe.Sizeof(s.checked)},
			"kind":     {unsafe.Offsetof(s.kind), unsafe.Sizeof(s.kind)},
			"indirect": {unsafe.Offsetof(s.indirect), unsafe.Sizeof(s.indirect)},
		}},
		{"registrations' counters", map[string][2]uintptr{
			"reg": {unsafe.Offsetof(s.reg), unsafe.Sizeof(s.reg)},
		}},
		{"ends' counters", map[string][2]uintptr{
			"ends": {unsafe.Offsetof(s.ends), unsafe.Sizeof(s.ends)},
		}},
		{"callbacks'", map[string][2]uintptr{
			"w":        {unsafe.Offsetof(s.w), unsafe.Sizeof(s.w)},
			"runID":    {unsafe.Offsetof(s.runID), unsafe.Sizeof(s.runID)},
			"dur":      {unsafe.Offsetof(s.dur), unsafe.Sizeof(s.dur)},
			"executed": {unsafe.Offsetof(s.executed), unsafe.Sizeof(s.executed)},
		}},
	}
	for i, l := range lines {
		lo, hi := uintptr(64*i), uintptr(64*(i+1))
		for name, f := range l.fields {
			if off := base + f[0]; off < lo || off+f[1] > hi {
				t.Errorf("site.%s at node bytes %d to %d, want it in the %s line, bytes %d to %d", name, off, off+f[1], l.name, lo, hi)
			}
		}
	}
}

// TestGroupSize pins the ranking's group, one per site, to 64 bytes: in
// another field order it had 13 bytes of padding and took 72.
func TestGroupSize(t *testing.T) {
	if n := unsafe.Sizeof(group{}); n > 64 {
		t.Errorf("a ranking group is %d bytes, want at most 64", n)
	}
}

// TestObjSlotSize pins an address table slot to 32 bytes: two to a cache
// line, none split across two. With the finalizer kept as an interface it
// was 40 bytes, and four slots in eight straddled two lines.
func TestObjSlotSize(t *testing.T) {
	if n := unsafe.Sizeof(objSlot{}); n != 32 {
		t.Errorf("an address table slot is %d bytes, want 32", n)
	}
}
