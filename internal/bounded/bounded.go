// Package bounded provides the bounded, insert-only concurrent hash map
// that gcprobe's interning tables are built on.
//
// A Map never holds more than the limit it was made with: once full,
// inserts of new keys fail (and are counted) while lookups of existing keys
// keep working. Entries are never removed, which is what lets readers go
// without locks: a slot, once published, never changes. Its index grows
// with the entries, up to what the limit needs, so that a table made for
// millions of entries costs little while it holds a few.
package bounded

import (
	"sync"
	"sync/atomic"
)

// Map is a bounded, insert-only hash map safe for concurrent use. The
// caller supplies the hash; keys are compared with ==, or, through GetFunc
// and LoadOrInitFunc, by a function of the value, for keys of variable
// length that the value holds (K is then struct{}).
//
// Lookups take no lock. Inserts of new keys take mu: they are rare (a new
// call site, a new stack), and under the lock an insert can grow the index
// without losing a racing one.
type Map[K comparable, V any] struct {
	idx      atomic.Pointer[index[K, V]]
	mu       sync.Mutex // serializes inserts and index growth
	limit    int64
	maxSize  int // the index size the limit needs
	n        atomic.Int64
	overflow atomic.Uint64
}

// index is an open-addressing table with linear probing. A grown map
// replaces its index with a copy twice the size; readers still probing
// the old one find every entry published before the copy, and look the
// rest up again under the lock (LoadOrInit) or miss them as a racing
// lookup may (Get).
type index[K comparable, V any] struct {
	slots []atomic.Pointer[node[K, V]]
	mask  uint64
}

type node[K comparable, V any] struct {
	hash uint64
	key  K
	val  V
}

// minIndexSize is a new map's index size, 8 bytes a slot.
const minIndexSize = 32

// New returns a Map that holds at most limit entries. limit must be > 0.
func New[K comparable, V any](limit int) *Map[K, V] {
	if limit <= 0 {
		panic("bounded.New: limit must be > 0")
	}
	m := &Map[K, V]{limit: int64(limit), maxSize: indexSize(limit)}
	m.idx.Store(newIndex[K, V](min(minIndexSize, m.maxSize)))
	return m
}

func newIndex[K comparable, V any](size int) *index[K, V] {
	return &index[K, V]{slots: make([]atomic.Pointer[node[K, V]], size), mask: uint64(size - 1)}
}

// indexSize is the number of slots for limit entries: a power of two at
// least 4/3 of limit plus a few, so that a full map is at most three
// quarters full and linear probes stay short. The index grows to it by
// doubling as entries arrive, 8 bytes a slot: at most 11 to 22 bytes per
// entry (a fixed index at most half full took 16 to 32 per unit of limit
// up front). At three quarters full, a lookup of a key not present probes
// about 8 slots on average, one or two cache lines.
func indexSize(limit int) int {
	size := 1
	for size < limit+limit/3+8 {
		size <<= 1
	}
	return size
}

// full reports whether an index of size slots holding n entries is as
// full as it may be.
func full(n, size int) bool { return 4*n >= 3*size }

// Get returns the value stored for key, or nil.
func (m *Map[K, V]) Get(hash uint64, key K) *V {
	x := m.idx.Load()
	i := hash & x.mask
	for probes := 0; probes <= int(x.mask); probes++ {
		n := x.slots[i].Load()
		if n == nil {
			return nil
		}
		if n.hash == hash && n.key == key {
			return &n.val
		}
		i = (i + 1) & x.mask
	}
	return nil
}

// GetFunc returns the value stored under hash for which eq reports true,
// or nil. It is Get for a map whose values carry their own key.
func (m *Map[K, V]) GetFunc(hash uint64, eq func(*V) bool) *V {
	x := m.idx.Load()
	i := hash & x.mask
	for probes := 0; probes <= int(x.mask); probes++ {
		n := x.slots[i].Load()
		if n == nil {
			return nil
		}
		if n.hash == hash && eq(&n.val) {
			return &n.val
		}
		i = (i + 1) & x.mask
	}
	return nil
}

// LoadOrInit returns the value stored for key. If there is none, it makes
// one, lets init fill it in before anyone else can see it, and publishes it;
// init may run and its value be discarded if another goroutine wins the
// race for the same key. When the map is full it returns nil and counts the
// refusal (see Overflow).
func (m *Map[K, V]) LoadOrInit(hash uint64, key K, init func(*V)) *V {
	if v := m.Get(hash, key); v != nil {
		return v
	}
	if m.n.Load() >= m.limit {
		m.overflow.Add(1)
		return nil
	}
	fresh := &node[K, V]{hash: hash, key: key}
	if init != nil {
		init(&fresh.val)
	}
	return m.insert(fresh, func(n *node[K, V]) bool { return n.key == key })
}

// LoadOrInitFunc is LoadOrInit for a map whose values carry their own key:
// it returns the value stored under hash for which eq reports true, or
// makes one with init and publishes it, as LoadOrInit does. init must fill
// in the value so that eq reports true for it.
func (m *Map[K, V]) LoadOrInitFunc(hash uint64, eq func(*V) bool, init func(*V)) *V {
	if v := m.GetFunc(hash, eq); v != nil {
		return v
	}
	if m.n.Load() >= m.limit {
		m.overflow.Add(1)
		return nil
	}
	fresh := &node[K, V]{hash: hash}
	init(&fresh.val)
	return m.insert(fresh, func(n *node[K, V]) bool { return eq(&n.val) })
}

// insert publishes fresh unless an entry with its hash for which same
// reports true is there already (then it returns that entry's value) or
// the map is full (then nil). The caller has initialized fresh.
func (m *Map[K, V]) insert(fresh *node[K, V], same func(*node[K, V]) bool) *V {
	m.mu.Lock()
	defer m.mu.Unlock()
	x := m.idx.Load()
	i := fresh.hash & x.mask
	for n := x.slots[i].Load(); n != nil; n = x.slots[i].Load() {
		if n.hash == fresh.hash && same(n) {
			return &n.val
		}
		i = (i + 1) & x.mask
	}
	count := m.n.Load()
	if count >= m.limit {
		m.overflow.Add(1)
		return nil
	}
	if full(int(count)+1, len(x.slots)) && len(x.slots) < m.maxSize {
		x = m.grow(x)
		i = fresh.hash & x.mask
		for x.slots[i].Load() != nil {
			i = (i + 1) & x.mask
		}
	}
	x.slots[i].Store(fresh)
	m.n.Add(1)
	return &fresh.val
}

// grow replaces x, the current index, with one twice its size holding the
// same entries, and returns it. Under mu.
func (m *Map[K, V]) grow(x *index[K, V]) *index[K, V] {
	y := newIndex[K, V](2 * len(x.slots))
	for j := range x.slots {
		n := x.slots[j].Load()
		if n == nil {
			continue
		}
		i := n.hash & y.mask
		for y.slots[i].Load() != nil {
			i = (i + 1) & y.mask
		}
		y.slots[i].Store(n)
	}
	m.idx.Store(y)
	return y
}

// Range calls f for every entry until f returns false. Entries inserted
// while Range runs may or may not be seen.
func (m *Map[K, V]) Range(f func(key K, v *V) bool) {
	x := m.idx.Load()
	for i := range x.slots {
		if n := x.slots[i].Load(); n != nil {
			if !f(n.key, &n.val) {
				return
			}
		}
	}
}

// Len returns the number of entries.
func (m *Map[K, V]) Len() int { return int(m.n.Load()) }

// Limit returns the most entries the map holds.
func (m *Map[K, V]) Limit() int { return int(m.limit) }

// Overflow returns how many inserts were refused because the map was full.
func (m *Map[K, V]) Overflow() uint64 { return m.overflow.Load() }
