// Package bounded provides the fixed-capacity, insert-only concurrent hash
// map that gcprobe's interning tables are built on.
//
// A Map never grows past the limit it was made with: once full, inserts of
// new keys fail (and are counted) while lookups of existing keys keep
// working. Entries are never removed, which is what lets readers go without
// locks: a slot, once published with a compare-and-swap, never changes.
package bounded

import (
	"sync/atomic"
)

// Map is a fixed-capacity, insert-only hash map safe for concurrent use.
// The caller supplies the hash; keys are compared with ==, or, through
// GetFunc and LoadOrInitFunc, by a function of the value, for keys of
// variable length that the value holds (K is then struct{}).
type Map[K comparable, V any] struct {
	slots    []atomic.Pointer[node[K, V]]
	mask     uint64
	limit    int64
	n        atomic.Int64
	overflow atomic.Uint64
}

type node[K comparable, V any] struct {
	hash uint64
	key  K
	val  V
}

// New returns a Map that holds at most limit entries. limit must be > 0.
func New[K comparable, V any](limit int) *Map[K, V] {
	if limit <= 0 {
		panic("bounded.New: limit must be > 0")
	}
	size := indexSize(limit)
	return &Map[K, V]{
		slots: make([]atomic.Pointer[node[K, V]], size),
		mask:  uint64(size - 1),
		limit: int64(limit),
	}
}

// indexSize is the number of slots for limit entries: a power of two at
// least 4/3 of limit plus a few, so that a full map is at most three
// quarters full: linear probes stay short, and there is room for the few
// entries that racing inserts may add past the limit. The index is
// allocated up front, 8 bytes a slot: 11 to 22 bytes per unit of limit
// (at most half full, it took 16 to 32). At three quarters full, a lookup
// of a key not present probes about 8 slots on average, one or two cache
// lines.
func indexSize(limit int) int {
	size := 1
	for size < limit+limit/3+8 {
		size <<= 1
	}
	return size
}

// Get returns the value stored for key, or nil.
func (m *Map[K, V]) Get(hash uint64, key K) *V {
	i := hash & m.mask
	for probes := 0; probes <= int(m.mask); probes++ {
		n := m.slots[i].Load()
		if n == nil {
			return nil
		}
		if n.hash == hash && n.key == key {
			return &n.val
		}
		i = (i + 1) & m.mask
	}
	return nil
}

// LoadOrInit returns the value stored for key. If there is none, it makes
// one, lets init fill it in before anyone else can see it, and publishes it;
// init may run and its value be discarded if another goroutine wins the
// race for the same key. When the map is full it returns nil and counts the
// refusal (see Overflow).
//
// The limit is checked before a new entry is published, not reserved, so
// that goroutines racing to insert the same key near the limit are never
// refused: the map may hold a few more entries than its limit, at most one
// for each goroutine inserting at that instant, never more than its slots.
func (m *Map[K, V]) LoadOrInit(hash uint64, key K, init func(*V)) *V {
	var fresh *node[K, V]
	i := hash & m.mask
	for probes := 0; probes <= int(m.mask); probes++ {
		n := m.slots[i].Load()
		if n == nil {
			if fresh == nil {
				if m.n.Load() >= m.limit {
					m.overflow.Add(1)
					return nil
				}
				fresh = &node[K, V]{hash: hash, key: key}
				if init != nil {
					init(&fresh.val)
				}
			}
			if m.slots[i].CompareAndSwap(nil, fresh) {
				m.n.Add(1)
				return &fresh.val
			}
			n = m.slots[i].Load()
		}
		if n.hash == hash && n.key == key {
			return &n.val
		}
		i = (i + 1) & m.mask
	}
	m.overflow.Add(1)
	return nil
}

// GetFunc returns the value stored under hash for which eq reports true,
// or nil. It is Get for a map whose values carry their own key.
func (m *Map[K, V]) GetFunc(hash uint64, eq func(*V) bool) *V {
	i := hash & m.mask
	for probes := 0; probes <= int(m.mask); probes++ {
		n := m.slots[i].Load()
		if n == nil {
			return nil
		}
		if n.hash == hash && eq(&n.val) {
			return &n.val
		}
		i = (i + 1) & m.mask
	}
	return nil
}

// LoadOrInitFunc is LoadOrInit for a map whose values carry their own key:
// it returns the value stored under hash for which eq reports true, or
// makes one with init and publishes it, as LoadOrInit does. init must fill
// in the value so that eq reports true for it: a goroutine that loses the
// race for the same key finds the winner's value with eq.
func (m *Map[K, V]) LoadOrInitFunc(hash uint64, eq func(*V) bool, init func(*V)) *V {
	var fresh *node[K, V]
	i := hash & m.mask
	for probes := 0; probes <= int(m.mask); probes++ {
		n := m.slots[i].Load()
		if n == nil {
			if fresh == nil {
				if m.n.Load() >= m.limit {
					m.overflow.Add(1)
					return nil
				}
				fresh = &node[K, V]{hash: hash}
				init(&fresh.val)
			}
			if m.slots[i].CompareAndSwap(nil, fresh) {
				m.n.Add(1)
				return &fresh.val
			}
			n = m.slots[i].Load()
		}
		if n.hash == hash && eq(&n.val) {
			return &n.val
		}
		i = (i + 1) & m.mask
	}
	m.overflow.Add(1)
	return nil
}

// Range calls f for every entry until f returns false. Entries inserted
// while Range runs may or may not be seen.
func (m *Map[K, V]) Range(f func(key K, v *V) bool) {
	for i := range m.slots {
		if n := m.slots[i].Load(); n != nil {
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
