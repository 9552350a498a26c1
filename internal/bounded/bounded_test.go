package bounded

import (
	"sync"
	"testing"
)

func TestMapBound(t *testing.T) {
	m := New[int, int](10)
	for i := range 100 {
		v := m.LoadOrInit(uint64(i), i, func(v *int) { *v = i * 2 })
		if i < 10 && (v == nil || *v != i*2) {
			t.Fatalf("insert %d: got %v", i, v)
		}
		if i >= 10 && v != nil {
			t.Fatalf("insert %d past the limit succeeded", i)
		}
	}
	if got := m.Len(); got != 10 {
		t.Fatalf("Len = %d, want 10", got)
	}
	if got := m.Overflow(); got != 90 {
		t.Fatalf("Overflow = %d, want 90", got)
	}
	// Existing keys still resolve when full.
	if v := m.LoadOrInit(3, 3, nil); v == nil || *v != 6 {
		t.Fatalf("lookup of an existing key when full: %v", v)
	}
	if v := m.Get(3, 3); v == nil || *v != 6 {
		t.Fatalf("Get(3) = %v", v)
	}
	if v := m.Get(50, 50); v != nil {
		t.Fatalf("Get(50) = %v, want nil", *v)
	}
}

func TestMapCollidingHashes(t *testing.T) {
	m := New[string, int](8)
	for i, k := range []string{"a", "b", "c"} {
		m.LoadOrInit(7, k, func(v *int) { *v = i })
	}
	for i, k := range []string{"a", "b", "c"} {
		if v := m.Get(7, k); v == nil || *v != i {
			t.Fatalf("Get(%q) = %v, want %d", k, v, i)
		}
	}
}

func TestMapConcurrentInsertSameKeys(t *testing.T) {
	m := New[int, int](64)
	var wg sync.WaitGroup
	got := make([][]*int, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range 64 {
				got[g] = append(got[g], m.LoadOrInit(uint64(k)*0x9e3779b97f4a7c15, k, nil))
			}
		}()
	}
	wg.Wait()
	if m.Len() != 64 || m.Overflow() != 0 {
		t.Fatalf("Len = %d, Overflow = %d; want 64, 0", m.Len(), m.Overflow())
	}
	for g := 1; g < 8; g++ {
		for k := range 64 {
			if got[g][k] != got[0][k] {
				t.Fatalf("goroutines disagree on the entry for key %d", k)
			}
		}
	}
	n := 0
	m.Range(func(int, *int) bool { n++; return true })
	if n != 64 {
		t.Fatalf("Range saw %d entries, want 64", n)
	}
}
