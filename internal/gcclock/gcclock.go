// Package gcclock is the process's one GC-cycle clock: a chain of sentinel
// objects with a finalizer and a chain with a cleanup, each re-arming
// itself when it runs, shared by every part of gcprobe that counts GC
// cycles (finalizerwatch's ages, memstats' wake-ups and queue latency).
//
// Each chain counts the cycles that the goroutine running its kind of
// callback has caught up with: a finalizer sentinel runs on the finalizer
// goroutine after the cycle that found it unreachable, behind every
// finalizer queued before it, so ages measured on this clock do not grow
// for healthy objects merely because the queue is backed up.
//
// The chains start with the first Subscribe and stop when the last
// subscription is cancelled; at most one sentinel of each kind is armed
// at a time in the process. A tick never blocks the goroutine it runs on
// (a few atomic operations, one small allocation, and the listeners'
// Tick, which must not block either), and the sentinels hold nothing but
// the chain's generation number: no user object, no listener.
//
// All functions and methods are safe for concurrent use.
package gcclock

import (
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"weak"
)

// Kind is which chain ticked: the finalizer chain or the cleanup chain.
type Kind uint8

// The two chains.
const (
	Finalizer Kind = iota // runs on the runtime's finalizer goroutine
	Cleanup               // runs on a runtime cleanup goroutine
	NumKinds
)

// A Listener is told of every cycle a chain counts while it is subscribed.
// Tick runs on the goroutine that runs the chain's kind of callback (every
// finalizer of the program, for Finalizer) and must not block. Returning
// false cancels the subscription, as Subscription.Cancel does: a listener
// whose owner is gone says so.
type Listener interface {
	Tick(k Kind) (keep bool)
}

// Subscription is a Listener's registration with the clock.
type Subscription struct {
	l    Listener
	dead atomic.Bool
}

// sentinel is a chain's link. The pointer field keeps it out of the tiny
// allocator (a finalizer or cleanup on a tiny block may run late or never,
// runtime.SetFinalizer's documentation); it is 16 bytes.
type sentinel struct {
	gen uint64 // the chain generation that armed it
	_   *byte
}

// clock is the process's one clock.
var clock clockState

type clockState struct {
	mu      sync.Mutex // serialises Subscribe, Cancel and pruning; never taken by a tick
	subs    atomic.Pointer[[]*Subscription]
	running bool // under mu

	// gen is the current chain generation. A chain's callbacks re-arm only
	// while their generation is current: stopping bumps it, so a callback
	// the runtime had already queued runs once more, changes nothing and
	// ends its chain; a restart (a later Subscribe) bumps it again.
	gen atomic.Uint64

	ticks  [NumKinds]atomic.Uint64
	runs   [NumKinds]atomic.Uint64 // sentinel callbacks the runtime ran, stale ones too (see Runs)
	starts atomic.Uint64

	// The sentinels waiting now, so that stopping can disarm them: a weak
	// pointer for the finalizer (a strong one would keep it alive), the
	// handle for the cleanup.
	fin atomic.Pointer[weak.Pointer[sentinel]]
	cln atomic.Pointer[runtime.Cleanup]
}

// Subscribe has l told of every GC cycle from now on, starting the chains
// if none runs.
func Subscribe(l Listener) *Subscription {
	s := &Subscription{l: l}
	clock.mu.Lock()
	defer clock.mu.Unlock()
	subs := append(slices.DeleteFunc(clock.load(), (*Subscription).cancelled), s)
	clock.subs.Store(&subs)
	if !clock.running {
		clock.running = true
		clock.starts.Add(1)
		g := clock.gen.Add(1)
		armFinalizer(g)
		armCleanup(g)
	}
	return s
}

// Cancel ends the subscription; the chains stop when no subscription is
// left. A Tick already under way may still complete after Cancel returns:
// a listener that must not count after it checks a flag of its own. Cancel
// is idempotent; it must not be called from Tick (return false instead).
func (s *Subscription) Cancel() {
	s.dead.Store(true)
	clock.mu.Lock()
	defer clock.mu.Unlock()
	clock.pruneLocked()
}

func (s *Subscription) cancelled() bool { return s.dead.Load() }

// Ticks returns how many cycles chain k has counted in this process, over
// every start of the chains.
func Ticks(k Kind) uint64 {
	if k >= NumKinds {
		return 0
	}
	return clock.ticks[k].Load()
}

// Runs returns how many of the clock's sentinel callbacks of kind k the
// runtime has run in this process: every tick, and the last sentinel of a
// chain that was stopped, which runs without ticking. It is what the
// runtime's own count of executed finalizers (or cleanups) includes on the
// clock's behalf, whoever subscribed.
func Runs(k Kind) uint64 {
	if k >= NumKinds {
		return 0
	}
	return clock.runs[k].Load()
}

// Starts returns how many times the chains have started: once, unless every
// subscription was cancelled and a new one came.
func Starts() uint64 { return clock.starts.Load() }

// load returns a copy of the subscriptions, to change and store back.
func (c *clockState) load() []*Subscription {
	if p := c.subs.Load(); p != nil {
		return slices.Clone(*p)
	}
	return nil
}

// pruneLocked drops the cancelled subscriptions and stops the chains if
// none is left.
func (c *clockState) pruneLocked() {
	subs := slices.DeleteFunc(c.load(), (*Subscription).cancelled)
	c.subs.Store(&subs)
	if len(subs) > 0 || !c.running {
		return
	}
	c.running = false
	c.gen.Add(1)
	if wp := c.fin.Load(); wp != nil {
		// nil once the sentinel is unreachable and its finalizer queued:
		// that one runs, sees a stale generation and does not re-arm.
		if s := wp.Value(); s != nil {
			runtime.SetFinalizer(s, nil)
		}
	}
	if h := c.cln.Load(); h != nil {
		h.Stop()
	}
}

func armFinalizer(gen uint64) {
	s := &sentinel{gen: gen}
	runtime.SetFinalizer(s, finalizerTick)
	wp := weak.Make(s)
	clock.fin.Store(&wp)
	// The chains may have stopped between the caller's check and the
	// Store, disarming the previous sentinel: then disarm this one.
	if clock.gen.Load() != gen {
		runtime.SetFinalizer(s, nil)
	}
}

func armCleanup(gen uint64) {
	// The argument is the generation, not the sentinel: a cleanup whose
	// argument reaches its object never runs.
	h := runtime.AddCleanup(&sentinel{gen: gen}, cleanupTick, gen)
	clock.cln.Store(&h)
	if clock.gen.Load() != gen { // see armFinalizer
		h.Stop()
	}
}

// finalizerTick runs on the finalizer goroutine, once per GC cycle.
//
// It arms the next sentinel before it tells the listeners, so that a GC
// cycle started by anyone who has seen tick n ticks n+1: a sentinel
// allocated while a cycle marks is allocated black and survives it
// (runtime/mgcmark.go, gcmarknewobject), so arming after the listeners
// would let a cycle started in between pass uncounted (a test that runs
// one runtime.GC per tick waited for ever).
func finalizerTick(s *sentinel) {
	clock.runs[Finalizer].Add(1)
	if s.gen != clock.gen.Load() {
		return
	}
	armFinalizer(s.gen)
	tick(Finalizer)
}

// cleanupTick runs on a cleanup goroutine, once per GC cycle. It arms
// before it ticks, as finalizerTick does.
func cleanupTick(gen uint64) {
	clock.runs[Cleanup].Add(1)
	if gen != clock.gen.Load() {
		return
	}
	armCleanup(gen)
	tick(Cleanup)
}

// tick counts a cycle and tells the listeners. A listener that returns
// false is marked cancelled; it is removed here if the lock is free, else
// by the next Subscribe or Cancel: a tick never waits for the lock.
func tick(k Kind) {
	clock.ticks[k].Add(1)
	p := clock.subs.Load()
	if p == nil {
		return
	}
	prune := false
	for _, s := range *p {
		if s.dead.Load() {
			continue
		}
		if !s.l.Tick(k) {
			s.dead.Store(true)
			prune = true
		}
	}
	if prune && clock.mu.TryLock() {
		clock.pruneLocked()
		clock.mu.Unlock()
	}
}
