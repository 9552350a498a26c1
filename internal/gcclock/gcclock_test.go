package gcclock

import (
	"fmt"
	"reflect"
	"runtime"
	"runtime/debug"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/gcprobe/probe/internal/testkit"
)

// TestSentinelNotTiny: the tiny allocator takes pointer-free objects under
// 16 bytes, and finalizers on tiny objects may never run.
func TestSentinelNotTiny(t *testing.T) {
	typ := reflect.TypeFor[sentinel]()
	hasPointer := false
	for i := range typ.NumField() {
		if typ.Field(i).Type.Kind() == reflect.Pointer {
			hasPointer = true
		}
	}
	if !hasPointer || unsafe.Sizeof(sentinel{}) < 16 {
		t.Fatalf("sentinel is %d bytes, pointer field %v: it could be tiny-allocated", unsafe.Sizeof(sentinel{}), hasPointer)
	}
}

type counter struct {
	n    [NumKinds]atomic.Uint64
	keep atomic.Bool
}

func (c *counter) Tick(k Kind) bool {
	c.n[k].Add(1)
	return c.keep.Load()
}

func newCounter() *counter {
	c := &counter{}
	c.keep.Store(true)
	return c
}

// TestOneChainForAll: two listeners are told of the same ticks of one
// chain per kind, and the chains end with the last subscription.
func TestOneChainForAll(t *testing.T) {
	a, b := newCounter(), newCounter()
	sa, sb := Subscribe(a), Subscribe(b)
	testkit.AwaitGC(t, 20*time.Second, "both chains to tick twice", func() bool {
		return a.n[Finalizer].Load() >= 2 && a.n[Cleanup].Load() >= 2
	})
	sa.Cancel()
	sa.Cancel() // idempotent
	// b, subscribed with a, has seen the ticks a saw, and goes on alone.
	base := b.n[Finalizer].Load()
	testkit.AwaitGC(t, 20*time.Second, "the chain to go on for the remaining listener", func() bool { return b.n[Finalizer].Load() >= base+2 })
	frozen := a.n[Finalizer].Load()
	sb.Cancel()
	// Stopped: after at most a tick already queued, nothing ticks.
	before := Ticks(Finalizer)
	for range 5 {
		runtime.GC()
		runtime.Gosched()
	}
	if got := Ticks(Finalizer); got > before+1 {
		t.Errorf("stopped chain ticked %d times in 5 cycles", got-before)
	}
	if got := a.n[Finalizer].Load(); got != frozen {
		t.Errorf("cancelled listener told of %d more ticks", got-frozen)
	}
	if clock.running {
		t.Error("chains still running without a subscription")
	}
}

// TestListenerEndsItself: returning false ends the subscription, and with
// it the chains.
func TestListenerEndsItself(t *testing.T) {
	c := newCounter()
	starts := Starts()
	Subscribe(c)
	if Starts() != starts+1 {
		t.Fatalf("Starts %d, want %d", Starts(), starts+1)
	}
	testkit.AwaitGC(t, 20*time.Second, "a tick", func() bool { return c.n[Finalizer].Load() >= 1 })
	c.keep.Store(false)
	testkit.AwaitGC(t, 20*time.Second, "the listener's subscription to end", func() bool {
		clock.mu.Lock()
		defer clock.mu.Unlock()
		return !clock.running
	})
}

// gcOnFirstTick starts one GC cycle from inside its first tick of kind k,
// as a listener's owner may once it has seen a tick.
type gcOnFirstTick struct {
	k    Kind
	n    atomic.Uint64
	done atomic.Bool
}

func (g *gcOnFirstTick) Tick(k Kind) bool {
	if k != g.k {
		return true
	}
	g.n.Add(1)
	if g.done.CompareAndSwap(false, true) {
		runtime.GC()
	}
	return true
}

// TestArmedBeforeTick: a cycle started after a listener has seen tick n
// ticks n+1, with no other cycle: the next sentinel is armed before the
// listeners are told. Arming after them lost exactly that cycle, and a
// caller running one runtime.GC per tick waited for ever.
func TestArmedBeforeTick(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1)) // no cycle but ours
	for _, k := range []Kind{Finalizer, Cleanup} {
		g := &gcOnFirstTick{k: k}
		s := Subscribe(g)
		testkit.AwaitGC(t, 20*time.Second, "a first tick", func() bool { return g.n.Load() >= 1 })
		// AwaitGC forces no cycle once it has seen the first tick: the
		// second can only come from the cycle the listener started (or
		// from one AwaitGC forced in the instant before it saw the first).
		testkit.Poll(t, 10*time.Second, fmt.Sprintf("kind %d: the cycle started from the first tick to tick", k), func() bool {
			return g.done.Load() && g.n.Load() >= 2
		})
		s.Cancel()
	}
}
