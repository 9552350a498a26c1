package finalizerwatch

import (
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// finState is what the runtime holds for an object's finalizer, as the
// randomized test models it.
type finState uint8

const (
	finNone    finState = iota
	finWatched          // set through the side under test (the watcher, or the runtime on the raw run)
	finRaw              // set with runtime.SetFinalizer directly
)

type randomSlot struct {
	obj *big
	rt  finState
	// entry: the watcher's address table has an entry for obj (a watched
	// finalizer, or one left stale by a direct clear).
	entry    bool
	cleanups []stopper // the watcher's and the runtime's, unstopped
}

// randomModel is what one goroutine of the test did, to check the ledger
// against once everything has drained.
type randomModel struct {
	staled        int // watched finalizers cleared with runtime.SetFinalizer...
	staleCleared  int // ...of them, cleared again through the watcher, object live (a normal clear)
	resolved      int // ...of them, set again through the watcher on the live object
	rawOverStale  int // raw finalizers set on an object whose watched one was cleared directly
	clears        int // watched finalizers cleared through the watcher
	races         int // watched sets racing watched clears of the same object
	holding       int // watched finalizers that hold memory (half of them reach their object too, and are cleared directly)
	stops         int // watched cleanups stopped before the object was dropped
	registeredFin int
	registeredCl  int
}

func (m *randomModel) add(o randomModel) {
	m.staled += o.staled
	m.staleCleared += o.staleCleared
	m.resolved += o.resolved
	m.rawOverStale += o.rawOverStale
	m.clears += o.clears
	m.races += o.races
	m.holding += o.holding
	m.stops += o.stops
	m.registeredFin += o.registeredFin
	m.registeredCl += o.registeredCl
}

// randomHold is what a memory-holding finalizer keeps: enough that one
// kept per stale entry shows in the live heap.
const randomHold = 64 << 10

// randomRun is one run of the randomized test through v: the watcher's
// functions, or on the raw run the runtime's. The raw run makes the same
// kinds of calls in the same proportions (not the same sequence: the
// finalizers' timing differs), as the baseline of the heap it keeps.
type randomRun struct {
	watchedRan, rawRan, cleanupRan, rawCleanupRan atomic.Int64
	model                                         randomModel
	// retained is the live heap the run left behind, once every object
	// it made was dropped and the queues drained.
	retained int64
}

func runRandom(t *testing.T, v via) *randomRun {
	const goroutines = 4
	ops := randomOps / goroutines
	run := &randomRun{}
	before := liveAfterDrain(t)

	var revivedMu sync.Mutex
	var revived []*big // objects that a finalizer resurrected

	watchedFin := func(*big) { run.watchedRan.Add(1) }
	resurrectingFin := func(b *big) {
		run.watchedRan.Add(1)
		revivedMu.Lock()
		revived = append(revived, b)
		revivedMu.Unlock()
	}
	rawFin := func(*big) { run.rawRan.Add(1) }
	setVia := func(o *big, fin func(*big)) {
		if fin == nil {
			v.setFinalizer(o, nil)
			return
		}
		v.setFinalizer(o, fin)
	}

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
				switch r.IntN(14) {
				case 0, 1: // a new object in the slot
					drop(s)
				case 2, 3: // set through the side under test
					if s.rt != finNone {
						continue // the runtime ends the program, through the watcher too
					}
					if s.entry {
						m.resolved++ // a stale entry: counted in ClearedOutside
					}
					f := watchedFin
					reach := false
					switch r.IntN(16) {
					case 0, 1:
						f = resurrectingFin
					case 2:
						// A closure that holds memory, and in half the
						// cases its object too, which it keeps from ever
						// being collected unless the finalizer is cleared:
						// so it is, at once and directly. The direct clear
						// must let go of both, as the runtime does.
						m.holding++
						buf := make([]byte, randomHold)
						f = func(*big) { run.watchedRan.Add(1); _ = buf[0] }
						if reach = r.IntN(2) == 0; reach {
							o := s.obj
							f = func(*big) { run.watchedRan.Add(1); _ = buf[0]; _ = o.buf }
						}
					}
					setVia(s.obj, f)
					m.registeredFin++
					s.rt, s.entry = finWatched, true
					if reach {
						runtime.SetFinalizer(s.obj, nil)
						m.staled++
						s.rt = finNone
					}
				case 4: // clear through the side under test
					if s.entry {
						if s.rt == finWatched {
							m.clears++
						} else {
							m.staleCleared++
						}
					}
					setVia(s.obj, nil)
					s.rt, s.entry = finNone, false
				case 5: // clear with the runtime
					if s.rt == finWatched {
						m.staled++ // its entry stays behind
					}
					runtime.SetFinalizer(s.obj, nil)
					s.rt = finNone
				case 6: // set with the runtime, between watched ones
					if s.rt != finNone {
						continue // the runtime ends the program
					}
					if s.entry {
						m.rawOverStale++
					}
					runtime.SetFinalizer(s.obj, rawFin)
					s.rt = finRaw
				case 7, 8: // a cleanup through the side under test
					s.cleanups = append(s.cleanups, addCleanupVia(v, s.obj, func(int) { run.cleanupRan.Add(1) }, op))
					m.registeredCl++
				case 9: // a cleanup with the runtime
					s.cleanups = append(s.cleanups, runtime.AddCleanup(s.obj, func(int) { run.rawCleanupRan.Add(1) }, op))
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
						*s = randomSlot{obj: b} // its finalizer ran: none is set, no entry left
						continue
					}
					revivedMu.Unlock()
				case 12: // a set racing a clear of the same object (one op in 8: two goroutines each)
					if s.rt != finNone || s.entry || r.IntN(8) != 0 {
						continue
					}
					raceSetClearVia(v, s.obj, watchedFin)
					setVia(s.obj, nil) // whichever came last, none is set now
					m.races++
					m.registeredFin++
					m.clears++ // by the racing clear or by this one
				case 13: // a raw clear and a raw set between watched ones
					if s.rt != finWatched {
						continue
					}
					runtime.SetFinalizer(s.obj, nil)
					runtime.SetFinalizer(s.obj, rawFin)
					m.staled++
					m.rawOverStale++
					s.rt = finRaw
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
	for _, m := range models {
		run.model.add(m)
	}
	run.retained = int64(liveAfterDrain(t)) - int64(before)
	return run
}

// raceSetClearVia sets a finalizer on o through v and clears it through v
// from two goroutines at once (see raceSetClear).
func raceSetClearVia(v via, o *big, fin func(*big)) {
	if !v.raw() {
		raceSetClear(v.w, o, fin)
		return
	}
	var ready atomic.Int32
	var wg sync.WaitGroup
	wg.Add(2)
	for _, set := range []bool{true, false} {
		go func() {
			defer wg.Done()
			ready.Add(1)
			for ready.Load() < 2 {
				runtime.Gosched()
			}
			if set {
				runtime.SetFinalizer(o, fin)
			} else {
				runtime.SetFinalizer(o, nil)
			}
		}()
	}
	wg.Wait()
}

// Raw and wrapped registrations, clears, Stops, resurrection, address
// reuse, sets racing clears of one object, raw finalizers set between
// watched ones, and finalizers that hold memory, mixed at random under GC
// pressure by four goroutines: once every object is dropped and the queues
// have drained, every site adds up, the callbacks that ran are exactly the
// ones counted executed, what is still outstanding is exactly what the
// watcher cannot have seen (its finalizers cleared with
// runtime.SetFinalizer directly, whose address was not registered again),
// and the live heap is back where it was, as after the same mix through
// the runtime alone: no stale entry keeps the memory its finalizer held.
func TestRandomizedAgainstTheRuntime(t *testing.T) {
	raw := runRandom(t, via{})
	// A third of the registrations sample their stacks: the flagged
	// records take every path too.
	w := newWatcher(t, WithStackSampleRate(3))
	orphans := orphanRuns.Load()
	run := runRandom(t, via{w: w})
	want := run.model

	checkLedger(t, w, &outcome{ran: map[string]int{
		"finalizers": int(run.watchedRan.Load()),
		"cleanups":   int(run.cleanupRan.Load()),
	}})
	if n := orphanRuns.Load() - orphans; n != 0 {
		t.Errorf("the runtime ran the watcher's finalizer %d times with no entry behind it", n)
	}

	fin, cl := w.totals(KindFinalizer), w.totals(KindCleanup)
	t.Logf("finalizers %+v", fin)
	t.Logf("cleanups   %+v", cl)
	t.Logf("model      %+v; the runtime's own ran %d finalizers, %d cleanups", want, run.rawRan.Load(), run.rawCleanupRan.Load())
	t.Logf("live heap left behind: runtime alone %+.1f MiB, through the watcher %+.1f MiB (%d finalizers held %d KiB each)",
		float64(raw.retained)/(1<<20), float64(run.retained)/(1<<20), want.holding, randomHold>>10)
	if fin.Registered != uint64(want.registeredFin) || cl.Registered != uint64(want.registeredCl) {
		t.Errorf("registered %d/%d, made %d/%d", fin.Registered, cl.Registered, want.registeredFin, want.registeredCl)
	}
	// Every watched finalizer that did not run was cleared through the
	// watcher or cleared directly; only the latter can still be
	// outstanding (until its address is registered or cleared again).
	if got, want := fin.Outstanding+fin.Cleared, uint64(want.clears+want.staled); got != want {
		t.Errorf("finalizers outstanding %d + cleared %d = %d, want %d", fin.Outstanding, fin.Cleared, got, want)
	}
	if fin.Outstanding > uint64(want.staled-want.staleCleared-want.resolved) {
		t.Errorf("finalizers outstanding %d, more than the %d cleared directly and not resolved", fin.Outstanding, want.staled-want.staleCleared-want.resolved)
	}
	if fin.ClearedOutside < uint64(want.resolved) || fin.Cleared-fin.ClearedOutside < uint64(want.clears+want.staleCleared) {
		t.Errorf("finalizers cleared %d, outside %d; want at least %d resolved by a set and %d cleared through the watcher",
			fin.Cleared, fin.ClearedOutside, want.resolved, want.clears+want.staleCleared)
	}
	if cl.Outstanding != 0 || cl.Cleared != uint64(want.stops) || cl.Executed != uint64(run.cleanupRan.Load()) {
		t.Errorf("cleanups %+v: want 0 outstanding, %d cleared, %d executed", cl, want.stops, run.cleanupRan.Load())
	}
	// The sampled stacks add up the same way: every sampled cleanup ran or
	// was stopped, and no more finalizers are outstanding under stacks
	// than at their sites (the estimates are scaled alike).
	var smpFin, smpCl StackSample
	for _, s := range w.stackSamples(KindFinalizer) {
		smpFin.Registered += s.Registered
		smpFin.Outstanding += s.Outstanding
	}
	for _, s := range w.stackSamples(KindCleanup) {
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
	// What the watcher may keep beyond the runtime: its ledger and the
	// stale entries of its address table, a few hundred KiB; not the
	// finalizers' memory (randomHold for each stale one that held some).
	if slack := int64(4 << 20); run.retained > raw.retained+slack {
		t.Errorf("the watched run left %.1f MiB more live heap than the runtime's (%.1f MiB), more than %d MiB", float64(run.retained-raw.retained)/(1<<20), float64(raw.retained)/(1<<20), slack>>20)
	}
	if want.staled == 0 || want.resolved == 0 || want.rawOverStale == 0 || want.races == 0 || want.holding == 0 ||
		fin.ClearedOutside == 0 || run.watchedRan.Load() == 0 || run.rawRan.Load() == 0 {
		t.Errorf("the mix missed a case: %+v", want)
	}
}
