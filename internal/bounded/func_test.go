package bounded

import (
	"slices"
	"sync"
	"testing"
)

// byKey is a value that carries its own variable-length key.
type byKey struct{ key []int }

func TestMapFuncVariableKeys(t *testing.T) {
	m := New[struct{}, byKey](8)
	eqTo := func(k []int) func(*byKey) bool {
		return func(v *byKey) bool { return slices.Equal(v.key, k) }
	}
	keys := [][]int{{1}, {1, 2}, {1, 2, 3}, {2, 1}}
	var got []*byKey
	for _, k := range keys {
		// One hash for all: only eq tells them apart.
		v := m.LoadOrInitFunc(42, eqTo(k), func(v *byKey) { v.key = slices.Clone(k) })
		if v == nil || !slices.Equal(v.key, k) {
			t.Fatalf("LoadOrInitFunc(%v) = %v", k, v)
		}
		got = append(got, v)
	}
	for i, k := range keys {
		if v := m.GetFunc(42, eqTo(k)); v != got[i] {
			t.Errorf("GetFunc(%v) = %p, want %p", k, v, got[i])
		}
		if v := m.LoadOrInitFunc(42, eqTo(k), func(*byKey) { t.Errorf("init ran for a known key %v", k) }); v != got[i] {
			t.Errorf("LoadOrInitFunc(%v) again = %p, want %p", k, v, got[i])
		}
	}
	if v := m.GetFunc(42, eqTo([]int{3})); v != nil {
		t.Errorf("GetFunc of an absent key = %v", v)
	}
	if m.Len() != len(keys) {
		t.Errorf("Len = %d, want %d", m.Len(), len(keys))
	}
}

func TestMapFuncBound(t *testing.T) {
	m := New[struct{}, int](4)
	for i := range 10 {
		v := m.LoadOrInitFunc(uint64(i), func(v *int) bool { return *v == i }, func(v *int) { *v = i })
		if (v != nil) != (i < 4) {
			t.Fatalf("insert %d: %v", i, v)
		}
	}
	if m.Len() != 4 || m.Overflow() != 6 {
		t.Fatalf("Len %d, Overflow %d; want 4, 6", m.Len(), m.Overflow())
	}
}

func TestMapFuncConcurrentInsertSameKeys(t *testing.T) {
	m := New[struct{}, int](64)
	var wg sync.WaitGroup
	got := make([][]*int, 8)
	for g := range 8 {
		wg.Go(func() {
			for k := range 64 {
				h := uint64(k%8) * 0x9e3779b97f4a7c15 // collisions on purpose
				got[g] = append(got[g], m.LoadOrInitFunc(h, func(v *int) bool { return *v == k }, func(v *int) { *v = k }))
			}
		})
	}
	wg.Wait()
	if m.Len() != 64 || m.Overflow() != 0 {
		t.Fatalf("Len = %d, Overflow = %d; want 64, 0", m.Len(), m.Overflow())
	}
	for g := 1; g < 8; g++ {
		for k := range 64 {
			if got[g][k] != got[0][k] || *got[g][k] != k {
				t.Fatalf("goroutines disagree on the entry for key %d", k)
			}
		}
	}
}

// TestIndexSize pins the index's load: a full map at most three quarters
// full, and at most 22 bytes of index per unit of limit past the smallest
// maps.
func TestIndexSize(t *testing.T) {
	for _, limit := range []int{1, 2, 3, 7, 100, 3071, 3072, 4096, 20000, 1 << 21} {
		size := indexSize(limit)
		if size&(size-1) != 0 || 4*limit > 3*size {
			t.Errorf("indexSize(%d) = %d: want a power of two at least 4/3 of the limit", limit, size)
		}
		if limit >= 100 && 8*size > 22*limit {
			t.Errorf("indexSize(%d) = %d: %d bytes per unit of limit, want at most 22", limit, size, 8*size/limit)
		}
	}
}

// A full map with no empty slot left (racing inserts past the limit can
// fill the last ones of a tiny map) must still answer lookups.
func TestGetTerminatesOnFullIndex(t *testing.T) {
	m := New[int, int](1)
	x := m.idx.Load()
	for i := range x.slots {
		x.slots[i].Store(&node[int, int]{hash: uint64(i), key: i})
	}
	if v := m.Get(99, 99); v != nil {
		t.Fatalf("Get of an absent key = %v", v)
	}
	if v := m.GetFunc(99, func(*int) bool { return false }); v != nil {
		t.Fatalf("GetFunc of an absent key = %v", v)
	}
}

// TestIndexGrowsWithEntries checks that a map made for many entries
// starts with a small index and grows it by the entries it holds, and
// that every entry stays found across growths.
func TestIndexGrowsWithEntries(t *testing.T) {
	m := New[int, int](1 << 20)
	if got := len(m.idx.Load().slots); got != minIndexSize {
		t.Fatalf("new map: %d slots, want %d", got, minIndexSize)
	}
	const n = 3000
	for k := range n {
		if v := m.LoadOrInit(uint64(k)*0x9e3779b97f4a7c15, k, func(v *int) { *v = k }); v == nil || *v != k {
			t.Fatalf("insert %d: %v", k, v)
		}
	}
	if got := len(m.idx.Load().slots); got != 4096 {
		t.Errorf("%d entries: %d slots, want 4096", n, got)
	}
	for k := range n {
		if v := m.Get(uint64(k)*0x9e3779b97f4a7c15, k); v == nil || *v != k {
			t.Fatalf("Get(%d) = %v after growing", k, v)
		}
	}
	// A small limit caps the index at the limit's size.
	small := New[int, int](100)
	for k := range 1000 {
		small.LoadOrInit(uint64(k), k, nil)
	}
	if got, want := len(small.idx.Load().slots), indexSize(100); got != want || small.Len() != 100 {
		t.Errorf("limit 100: %d slots and %d entries, want %d and 100", got, small.Len(), want)
	}
}

// TestConcurrentGrowth inserts distinct keys from several goroutines while
// others look them up: an entry, once inserted, is found by its inserter
// and by everyone after, whatever growth happens meanwhile.
func TestConcurrentGrowth(t *testing.T) {
	const writers, perWriter = 4, 2000
	m := New[int, int](writers * perWriter)
	var wg sync.WaitGroup
	var stop sync.WaitGroup
	done := make(chan struct{})
	stop.Add(1)
	go func() { // a reader racing the growths
		defer stop.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			for k := range 64 {
				if v := m.Get(uint64(k)*0x9e3779b97f4a7c15, k); v != nil && *v != k {
					t.Errorf("Get(%d) = %d", k, *v)
					return
				}
			}
		}
	}()
	for w := range writers {
		wg.Go(func() {
			for j := range perWriter {
				k := j*writers + w
				h := uint64(k) * 0x9e3779b97f4a7c15
				if v := m.LoadOrInit(h, k, func(v *int) { *v = k }); v == nil || *v != k {
					t.Errorf("insert %d: %v", k, v)
					return
				}
				if v := m.Get(h, k); v == nil || *v != k {
					t.Errorf("Get(%d) after its insert = %v", k, v)
					return
				}
			}
		})
	}
	wg.Wait()
	close(done)
	stop.Wait()
	if m.Len() != writers*perWriter || m.Overflow() != 0 {
		t.Fatalf("Len %d, Overflow %d; want %d, 0", m.Len(), m.Overflow(), writers*perWriter)
	}
	for k := range writers * perWriter {
		if v := m.Get(uint64(k)*0x9e3779b97f4a7c15, k); v == nil || *v != k {
			t.Fatalf("Get(%d) = %v", k, v)
		}
	}
}
