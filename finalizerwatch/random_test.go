package finalizerwatch

import (
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// finState is what the runtime and the ledger hold for an object's
// finalizer, as the randomized test models it.
type finState uint8

const (
	finNone    finState = iota
	finWatched          // set through the watcher
	finRaw              // set with runtime.SetFinalizer
	finStale            // set through the watcher, cleared with runtime.SetFinalizer
)

type randomSlot struct {
	obj      *big
	fin      finState
	cleanups []stopper // the watcher's and the runtime's, unstopped
}

// randomModel is what one goroutine of the test did, to check the ledger
// against once everything has drained.
type randomModel struct {
	staled        int // watched finalizers cleared with runtime.SetFinalizer...
	staleCleared  int // ...of them, cleared again through the watcher, object live (a normal clear)
	resolved      int // ...of them, set again through the watcher on the live object
	clears        int // watched finalizers cleared through the watcher
	stops         int // watched cleanups stopped before the object was dropped
	registeredFin int
	registeredCl  int
}

// Raw and wrapped registrations, clears, Stops, resurrection and address
// reuse, mixed at random under GC pressure by four goroutines: once every
// object is dropped and the queues have drained, every site adds up, the
// callbacks that ran are exactly the ones counted executed, and what is
// still outstanding is exactly what the watcher cannot have seen (its
// finalizers cleared with runtime.SetFinalizer directly, whose address was
// not registered again).
func TestRandomizedAgainstTheRuntime(t *testing.T) {
	const goroutines = 4
	ops := randomOps / goroutines
	// A third of the registrations sample their stacks: the flagged
	// records take every path too.
	w := newWatcher(t, WithStackSampleRate(3))

	var watchedRan, rawRan, cleanupRan, rawCleanupRan atomic.Int64
	var revivedMu sync.Mutex
	var revived []*big // objects that a finalizer resurrected

	watchedFin := func(*big) { watchedRan.Add(1) }
	resurrectingFin := func(b *big) {
		watchedRan.Add(1)
		revivedMu.Lock()
		revived = append(revived, b)
		revivedMu.Unlock()
	}
	rawFin := func(*big) { rawRan.Add(1) }

	models := make([]randomModel, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := &models[g]
			r := rand.New(rand.NewPCG(uint64(g), 42))
			slots := make([]randomSlot, 256)
			for i := range slots {
				slots[i].obj = &big{}
			}
			// drop lets the slot's object go: its finalizer and cleanups
			// run, unless stopped or cleared.
			drop := func(s *randomSlot) {
				*s = randomSlot{obj: &big{}}
			}
			for op := range ops {
				s := &slots[r.IntN(len(slots))]
				switch r.IntN(12) {
				case 0, 1: // a new object in the slot
					drop(s)
				case 2, 3: // set through the watcher
					switch s.fin {
					case finRaw, finWatched:
						continue // the runtime would end the program, through the watcher too
					case finStale:
						// Resolved now: counted in ClearedOutside.
						m.resolved++
					}
					f := watchedFin
					if r.IntN(8) == 0 {
						f = resurrectingFin
					}
					w.SetFinalizer(s.obj, f)
					m.registeredFin++
					s.fin = finWatched
				case 4: // clear through the watcher
					switch s.fin {
					case finWatched:
						m.clears++
					case finStale:
						m.staleCleared++
					}
					w.SetFinalizer(s.obj, nil)
					s.fin = finNone
				case 5: // clear with the runtime
					if s.fin == finWatched {
						m.staled++
						s.fin = finStale
					} else if s.fin == finRaw {
						s.fin = finNone
					}
					runtime.SetFinalizer(s.obj, nil)
				case 6: // set with the runtime
					if s.fin != finNone {
						continue // watched or raw: the runtime would end the program; stale: see SetFinalizer
					}
					runtime.SetFinalizer(s.obj, rawFin)
					s.fin = finRaw
				case 7, 8: // a cleanup through the watcher
					s.cleanups = append(s.cleanups, AddCleanupTo(w, s.obj, func(int) { cleanupRan.Add(1) }, op))
					m.registeredCl++
				case 9: // a cleanup with the runtime
					s.cleanups = append(s.cleanups, runtime.AddCleanup(s.obj, func(int) { rawCleanupRan.Add(1) }, op))
				case 10: // Stop one
					if n := len(s.cleanups); n > 0 {
						i := r.IntN(n)
						c := s.cleanups[i]
						c.Stop()
						if _, ok := c.(Cleanup); ok {
							m.stops++
						}
						s.cleanups = append(s.cleanups[:i], s.cleanups[i+1:]...)
					}
				case 11: // GC pressure, and resurrected objects back into slots
					if r.IntN(64) == 0 {
						runtime.GC()
					}
					revivedMu.Lock()
					if len(revived) > 0 {
						b := revived[len(revived)-1]
						revived = revived[:len(revived)-1]
						revivedMu.Unlock()
						*s = randomSlot{obj: b} // its finalizer ran: none is set
						continue
					}
					revivedMu.Unlock()
				}
			}
			for i := range slots {
				slots[i] = randomSlot{}
			}
		}()
	}
	wg.Wait()
	// Finalizers that run now may resurrect their objects once more: drop
	// them, and drain again, until none is left.
	for range 3 {
		revivedMu.Lock()
		revived = nil
		revivedMu.Unlock()
		drain(t)
	}

	var want randomModel
	for _, m := range models {
		want.staled += m.staled
		want.staleCleared += m.staleCleared
		want.resolved += m.resolved
		want.clears += m.clears
		want.stops += m.stops
		want.registeredFin += m.registeredFin
		want.registeredCl += m.registeredCl
	}
	checkLedger(t, w, &outcome{ran: map[string]int{
		"finalizers": int(watchedRan.Load()),
		"cleanups":   int(cleanupRan.Load()),
	}})

	fin, cl := w.Totals(KindFinalizer), w.Totals(KindCleanup)
	t.Logf("finalizers %+v", fin)
	t.Logf("cleanups   %+v", cl)
	t.Logf("model      %+v; the runtime's own ran %d finalizers, %d cleanups", want, rawRan.Load(), rawCleanupRan.Load())
	if fin.Registered != uint64(want.registeredFin) || cl.Registered != uint64(want.registeredCl) {
		t.Errorf("registered %d/%d, made %d/%d", fin.Registered, cl.Registered, want.registeredFin, want.registeredCl)
	}
	// Every watched finalizer that did not run was cleared through the
	// watcher or cleared directly; only the latter can still be
	// outstanding (until its address is registered or cleared again).
	if got, want := fin.Outstanding+fin.Cleared, uint64(want.clears+want.staled); got != want {
		t.Errorf("finalizers outstanding %d + cleared %d = %d, want %d", fin.Outstanding, fin.Cleared, got, want)
	}
	if fin.Outstanding > uint64(want.staled-want.staleCleared) {
		t.Errorf("finalizers outstanding %d, more than the %d cleared directly", fin.Outstanding, want.staled-want.staleCleared)
	}
	if fin.ClearedOutside < uint64(want.resolved) || fin.Cleared-fin.ClearedOutside < uint64(want.clears+want.staleCleared) {
		t.Errorf("finalizers cleared %d, outside %d; want at least %d resolved by a set and %d cleared through the watcher",
			fin.Cleared, fin.ClearedOutside, want.resolved, want.clears+want.staleCleared)
	}
	if cl.Outstanding != 0 || cl.Cleared != uint64(want.stops) || cl.Executed != uint64(cleanupRan.Load()) {
		t.Errorf("cleanups %+v: want 0 outstanding, %d cleared, %d executed", cl, want.stops, cleanupRan.Load())
	}
	// The sampled stacks add up the same way: every sampled cleanup ran or
	// was stopped, and no more finalizers are outstanding under stacks
	// than at their sites (the estimates are scaled alike).
	var smpFin, smpCl StackSample
	for _, s := range w.StackSamples(KindFinalizer) {
		smpFin.Registered += s.Registered
		smpFin.Outstanding += s.Outstanding
	}
	for _, s := range w.StackSamples(KindCleanup) {
		smpCl.Registered += s.Registered
		smpCl.Executed += s.Executed
		smpCl.Cleared += s.Cleared
		smpCl.Outstanding += s.Outstanding
	}
	if smpCl.Outstanding != 0 || smpCl.Executed+smpCl.Cleared != smpCl.Registered || smpCl.Registered == 0 {
		t.Errorf("sampled cleanups %+v: want every one executed or cleared", smpCl)
	}
	if smpFin.Registered == 0 || smpFin.Outstanding > 3*fin.Outstanding {
		t.Errorf("sampled finalizers: %d registered, %d outstanding; sites %d outstanding", smpFin.Registered, smpFin.Outstanding, fin.Outstanding)
	}
	if want.staled == 0 || want.resolved == 0 || fin.ClearedOutside == 0 || watchedRan.Load() == 0 || rawRan.Load() == 0 {
		t.Errorf("the mix missed a case: %+v", want)
	}
}
