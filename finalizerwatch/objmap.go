package finalizerwatch

import (
	"sync"
)

// objMap finds the ledger entry of an object's finalizer by the object's
// address. An entry exists exactly while the watcher's finalizer is set on
// that object: it is added before runtime.SetFinalizer and removed when the
// finalizer runs or is cleared, so a freed object's address, once reused,
// never finds a stale entry. Keys are addresses (uintptr), not pointers:
// the map must not keep the objects alive. It is bounded by the number of
// live objects with a finalizer, which the runtime holds a record of anyway.
type objMap struct {
	shards [objShards]objShard
}

const objShards = 64

type objShard struct {
	mu sync.Mutex
	m  map[uintptr]finEntry
	_  [40]byte // keep shards on separate cache lines
}

// finEntry is what the finalizer wrapper needs when the object's finalizer
// runs or is cleared.
type finEntry struct {
	site *site
	fin  any // the user's finalizer
	cyc  uint32
	call callKind
}

func (m *objMap) init() {
	for i := range m.shards {
		m.shards[i].m = make(map[uintptr]finEntry)
	}
}

func (m *objMap) shard(addr uintptr) *objShard {
	// Heap objects are at least 8-byte aligned; mix the address so
	// neighbouring objects spread over the shards.
	return &m.shards[(uint64(addr)*0x9e3779b97f4a7c15)>>58]
}

// insert adds e for addr unless addr already has an entry.
func (m *objMap) insert(addr uintptr, e finEntry) bool {
	s := m.shard(addr)
	s.mu.Lock()
	if _, dup := s.m[addr]; dup {
		s.mu.Unlock()
		return false
	}
	s.m[addr] = e
	s.mu.Unlock()
	return true
}

// take removes and returns the entry for addr.
func (m *objMap) take(addr uintptr) (finEntry, bool) {
	s := m.shard(addr)
	s.mu.Lock()
	e, ok := s.m[addr]
	if ok {
		delete(s.m, addr)
	}
	s.mu.Unlock()
	return e, ok
}

// len returns the number of entries, for tests.
func (m *objMap) len() int {
	n := 0
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		n += len(s.m)
		s.mu.Unlock()
	}
	return n
}
