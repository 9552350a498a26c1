package finalizerwatch

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gcprobe/probe/internal/testkit"
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

// TestObjMapProbeLengths checks that placing neighbouring addresses in
// neighbouring slots (see objHash) keeps probe sequences short for the
// address patterns programs make: objects allocated one after another, of
// several sizes, and addresses scattered at random.
func TestObjMapProbeLengths(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, tc := range []struct {
		name  string
		addrs func(i int) uintptr
	}{
		{"consecutive 8-byte", func(i int) uintptr { return 0xc000000000 + 8*uintptr(i) }},
		{"consecutive 16-byte", func(i int) uintptr { return 0xc000000000 + 16*uintptr(i) }},
		{"consecutive 48-byte", func(i int) uintptr { return 0xc000000000 + 48*uintptr(i) }},
		{"every other 16-byte, in 8 KiB spans far apart", func(i int) uintptr {
			return 0xc000000000 + uintptr(i/256)<<20 + 32*uintptr(i%256)
		}},
		{"random 16-byte aligned", func(int) uintptr { return 0xc000000000 + 16*uintptr(r.IntN(1<<26)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m objMap
			const n = 200_000
			seen := map[uintptr]bool{}
			for i := range n {
				a := tc.addrs(i)
				if !seen[a] {
					seen[a] = true
					m.put(a, finEntry{})
				}
			}
			var sum, worst int
			for i := range m.shards {
				s := &m.shards[i]
				mask := len(s.slots) - 1
				for j, sl := range s.slots {
					if sl.addr == 0 {
						continue
					}
					d := (j - s.home(sl.addr, objHash(sl.addr))) & mask
					sum += d
					worst = max(worst, d)
				}
			}
			mean := float64(sum) / float64(len(seen))
			t.Logf("%d entries: mean displacement %.2f slots, worst %d", len(seen), mean, worst)
			if mean > 2 || worst > 4*chunkSlots {
				t.Fatalf("%d entries: mean displacement %.2f slots, worst %d; want at most 2 and %d", len(seen), mean, worst, 4*chunkSlots)
			}
		})
	}
}

// seqAddr is the address of the i-th of a run of 48-byte objects allocated
// one after another, as the objMap tests lay them out.
func seqAddr(i int) uintptr { return 0xc000000000 + 48*uintptr(i) }

// putSeq puts entries for the first n objects of the run into m; takeSeq
// takes them out again.
func putSeq(m *objMap, n int) {
	for i := range n {
		m.put(seqAddr(i), finEntry{})
	}
}

func takeSeq(m *objMap, n int) {
	for i := range n {
		m.take(seqAddr(i))
	}
}

// TestObjMapNeighboursShareCacheLines checks the point of objHash's layout:
// objects allocated one after another have their entries side by side.
func TestObjMapNeighboursShareCacheLines(t *testing.T) {
	var m objMap
	const n = 100_000
	putSeq(&m, n)
	slotOf := func(a uintptr) (*objShard, int) {
		h := objHash(a)
		s := m.shard(h)
		i := s.home(a, h)
		for s.slots[i].addr != a {
			i = (i + 1) & (len(s.slots) - 1)
		}
		return s, i
	}
	near := 0
	for i := range n - 1 {
		s1, j1 := slotOf(seqAddr(i))
		s2, j2 := slotOf(seqAddr(i + 1))
		if s1 == s2 && j2-j1 >= 0 && j2-j1 <= 8 {
			near++
		}
	}
	if frac := float64(near) / (n - 1); frac < 0.9 {
		t.Fatalf("%.0f%% of consecutive objects have entries within 8 slots of each other, want at least 90%%", 100*frac)
	}
}

// TestObjMapShrinksAfterTheBurst checks that the address table keeps its
// size while objects come and go from one GC cycle to the next, and gives
// the memory back once a burst has been over for two cycles.
func TestObjMapShrinksAfterTheBurst(t *testing.T) {
	w := newWatcher(t) // runs the GC-cycle clock
	var m objMap
	const n = 20_000
	slots := func() (total int) {
		for i := range m.shards {
			total += len(m.shards[i].slots)
		}
		return total
	}
	for round := range 3 {
		putSeq(&m, n)
		peak := slots()
		takeSeq(&m, n)
		if got := slots(); got != peak {
			t.Fatalf("round %d: drained table shrank from %d to %d slots within the cycle", round, peak, got)
		}
		testkit.AwaitGC(t, 20*time.Second, "a GC cycle", clocksAdvanced(w, 1))
	}
	testkit.AwaitGC(t, 20*time.Second, "2 GC cycles", clocksAdvanced(w, 2))
	touched := map[*objShard]bool{}
	for a := seqAddr(0); len(touched) < objShards; a += 1 << chunkShift { // touch every shard
		touched[m.shard(objHash(a))] = true
		m.put(a, finEntry{})
		m.take(a)
	}
	if got, want := slots(), objShards<<minShardBits; got != want {
		t.Fatalf("two cycles after the burst the table has %d slots, want %d", got, want)
	}
	if idle := m.idle.Load(); idle != 0 {
		t.Errorf("shards %b still wait to shrink once shrunk", idle)
	}
}

// TestObjMapRefilledShardIsNotIdle checks that a shard marked as waiting
// to shrink, and filled again before it did, is no longer marked: the
// GC-cycle clock's tick would otherwise start a shrink pass for nothing.
func TestObjMapRefilledShardIsNotIdle(t *testing.T) {
	var m objMap
	const n = 20_000
	putSeq(&m, n)
	takeSeq(&m, n)
	if m.idle.Load() == 0 {
		t.Fatal("test broken: no shard waits to shrink after the table was drained")
	}
	putSeq(&m, n)
	if idle := m.idle.Load(); idle != 0 {
		t.Errorf("shards %b still wait to shrink once filled again", idle)
	}
}

// burstObj is what TestAddressTableShrinksWhenIdle registers on.
type burstObj struct {
	p *int
	_ [2]uint64
}

// registerBurst sets a finalizer on n objects that are unreachable when it
// returns.
//
//go:noinline
func registerBurst(w *Watcher, n int) {
	for range n {
		w.SetFinalizer(&burstObj{}, func(*burstObj) {})
	}
}

// objSlots returns, for each shard of the address table, its entries and
// slots.
func objSlots() (n, slots [objShards]int) {
	for i := range objs.shards {
		s := &objs.shards[i]
		s.mu.Lock()
		n[i], slots[i] = s.n, len(s.slots)
		s.mu.Unlock()
	}
	return n, slots
}

// TestAddressTableShrinksWhenIdle checks that the address table gives back
// what a burst of registrations grew it to once the burst's finalizers
// have run, although no registration comes after it: shards that no put or
// take visits are shrunk on the GC-cycle clock's ticks. Before, they kept
// their peak size for good (about 8 MB after this burst).
func TestAddressTableShrinksWhenIdle(t *testing.T) {
	w := newWatcher(t)
	n := burstRegistrations
	registerBurst(w, n)
	_, peak := objSlots()
	total := 0
	for _, s := range peak {
		total += s
	}
	if total < objShards*(n/objShards) {
		t.Fatalf("test broken: the burst grew the table to %d slots, want at least %d", total, objShards*(n/objShards))
	}
	// Every shard ends at most a quarter full's worth of slots above its
	// entries (other tests' registrations may still be in it), or at the
	// minimum size.
	shrunk := func() bool {
		n, slots := objSlots()
		for i := range slots {
			if slots[i] > 1<<minShardBits && slots[i] > 8*n[i] {
				return false
			}
		}
		return true
	}
	testkit.AwaitGC(t, 30*time.Second, fmt.Sprintf("every shard back to its minimum size or a quarter full above its entries (peak %d slots in all)", total), shrunk)
}
