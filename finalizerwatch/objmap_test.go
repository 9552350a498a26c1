package finalizerwatch

import (
	"math/rand/v2"
	"testing"
)

// The address table against a Go map, through inserts, replacements and
// removals in random order, growing and shrinking.
func TestObjMapAgainstModel(t *testing.T) {
	var m objMap
	model := map[uintptr]uint32{}
	r := rand.New(rand.NewPCG(1, 2))
	addrs := make([]uintptr, 5000)
	for i := range addrs {
		addrs[i] = uintptr(0xc000000000 + 16*r.IntN(1<<20))
	}
	for step := range 200_000 {
		a := addrs[r.IntN(len(addrs))]
		if r.IntN(2) == 0 {
			want, had := model[a]
			old, replaced := m.put(a, finEntry{cyc: uint32(step)})
			if replaced != had || (had && old.cyc != want) {
				t.Fatalf("step %d: put(%#x) replaced %v (old %d), model has %v (%d)", step, a, replaced, old.cyc, had, want)
			}
			model[a] = uint32(step)
		} else {
			want, had := model[a]
			e, ok := m.take(a)
			if ok != had || (ok && e.cyc != want) {
				t.Fatalf("step %d: take(%#x) = %v,%v; model %v,%v", step, a, e.cyc, ok, want, had)
			}
			delete(model, a)
		}
		if step%10_000 == 0 && m.len() != len(model) {
			t.Fatalf("step %d: len %d, model %d", step, m.len(), len(model))
		}
	}
	for a, want := range model {
		if e, ok := m.take(a); !ok || e.cyc != want {
			t.Fatalf("final take(%#x) = %v,%v want %v", a, e.cyc, ok, want)
		}
	}
	if m.len() != 0 {
		t.Fatalf("len %d after removing everything", m.len())
	}
}

func addrOf(o *obj32) uintptr { x := any(o); return uintptr(dataOf(&x)) }
