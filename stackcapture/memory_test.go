package stackcapture

import (
	"runtime"
	"testing"
)

// heapInUse returns the bytes of live heap objects after a full GC.
func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestTableBytesPerStack pins what a table holds per stack: its index, a
// small node and one copy of the PCs, not a fixed MaxDepth array per stack
// nor symbolized frames. 10 000 stacks of 16 PCs in a table of limit
// 20 000 take about 1.8 MiB (index 128 KiB, 176 bytes a stack); before
// stacks were keyed by their PCs, 5.4 MiB.
func TestTableBytesPerStack(t *testing.T) {
	const n, depth = 10_000, 16
	const bound = 3 << 20
	pcs := make([]uintptr, depth)
	before := heapInUse()
	tab, _ := NewTable(WithLimit(2 * n))
	for i := range n {
		for j := range pcs {
			pcs[j] = uintptr(i*depth + j + 1)
		}
		tab.Intern(pcs)
	}
	after := heapInUse()
	runtime.KeepAlive(tab)
	if tab.Len() != n {
		t.Fatalf("table holds %d stacks, want %d", tab.Len(), n)
	}
	grown := int64(after) - int64(before)
	t.Logf("%d stacks of %d PCs: heap +%d KiB, %d bytes a stack", n, depth, grown/1024, grown/n)
	if grown > bound {
		t.Errorf("%d stacks of %d PCs take %d KiB of heap, want at most %d KiB", n, depth, grown/1024, bound/1024)
	}
}
