package finalizerwatch

import (
	"sync/atomic"
	"unsafe"

	"github.com/gcprobe/probe/stackcapture"
)

// Sampled full stacks. By default a registration captures only its call
// site (a few nanoseconds); capturing its full stack costs far more. Like
// runtime.MemProfileRate for allocations, one registration in
// StackSampleRate, chosen at random, also captures its full stack and is
// counted under it in a second table, of sampled stacks. Site counts stay
// exact; the counts of a sampled stack, multiplied by the rate, estimate
// the registrations made through that stack (StackSample).
//
// Each registration is sampled independently with probability 1/rate, so
// the scaled counts are unbiased estimates, as with the heap profile. The
// draw is one 32-bit number from the runtime's per-thread wyrand generator
// (runtime.cheaprand, which the runtime keeps linkable for packages
// outside it: runtime/rand.go), a nanosecond and no shared state, compared
// with a threshold: no per-site state, no atomic add. math/rand/v2's
// global functions draw from the runtime's ChaCha8 generator instead, which
// measured 6 ns a registration here.

// stackSample is an entry of the sampled-stacks table: the sampled
// registrations made through one stack.
type stackSample struct {
	site  *site // the site the stack's registrations are counted at
	stack *stackcapture.Stack

	registered atomic.Uint64
	executed   atomic.Uint64
	cleared    atomic.Uint64
}

type sampleKey struct {
	kind  Kind
	stack *stackcapture.Stack
}

// sampleNow reports whether a registration captures its full stack: one
// in rate, at random, unless full stacks keep every stack anyway.
func (w *Watcher) sampleNow() bool {
	t := w.sampleThreshold.Load()
	return t != 0 && uint64(cheaprand()) < t && !w.full.Load()
}

// cheaprand is the runtime's per-thread generator.
//
//go:linkname cheaprand runtime.cheaprand
func cheaprand() uint32

// sampleThreshold is the 32-bit draw below which a registration is sampled
// at rate: 2^32/rate (at least 1: a rate beyond 2^32 samples one in 2^32),
// 0 for none.
func sampleThreshold(rate int64) uint64 {
	if rate <= 0 {
		return 0
	}
	return max(1<<32/uint64(rate), 1)
}

// sample captures the full stack of a registration counted at s, skip
// frames above sample's caller, and counts it in the sampled-stacks table.
// It returns nil if the table has no room for the stack.
//
//go:noinline
func (w *Watcher) sample(s *site, skip int) *stackSample {
	var pcs [stackcapture.MaxDepth]uintptr
	n := stackcapture.Callers(skip+1, pcs[:])
	stk := w.stacks.Intern(pcs[:n])
	if stk.Overflow() {
		return nil
	}
	key := sampleKey{kind: s.kind, stack: stk}
	h := stackcapture.HashPC(uintptr(unsafe.Pointer(stk))) ^ uint64(s.kind)
	smp := w.samples.Get(h, key)
	if smp == nil {
		smp = w.samples.LoadOrInit(h, key, func(e *stackSample) { e.site, e.stack = s, stk })
		if smp == nil {
			return nil
		}
	}
	smp.registered.Add(1)
	return smp
}

// A sampled registration's record (finEntry, cleanupHeader) points to
// its stackSample instead of its site, and says so in a flag: the
// stackSample leads to the site. So the run or clear of a sampled
// registration is counted under its stack too, with no lookup, and an
// unsampled registration pays nothing for it.

// StackSample is what the sampled stacks of one registration path say
// (see StackSampleRate). Counts are estimates: the sampled registrations'
// counts multiplied by Rate.
type StackSample struct {
	Kind  Kind
	Site  stackcapture.Frame // the site the stack's registrations are counted at
	Stack []stackcapture.Frame
	PCs   []uintptr
	// Rate is the sample rate the counts were scaled by.
	Rate int
	// Sampled is how many registrations were sampled through this stack.
	Sampled     uint64
	Registered  uint64
	Executed    uint64
	Cleared     uint64
	Outstanding uint64
}

// StackSampleRate returns the watcher's stack sample rate: one
// registration in that many, at random, captures its full stack; 0 if none
// does. See WithStackSampleRate.
func (w *Watcher) StackSampleRate() int { return int(w.sampleRate.Load()) }

// SetStackSampleRate sets the stack sample rate from the next registration
// on (see WithStackSampleRate); rate 0 turns sampling off. It panics if
// rate is negative. Samples taken at an earlier rate keep their counts, and
// StackSamples scales them by the rate in force when it reads them, as the
// heap profile does with MemProfileRate: change the rate once, early.
func (w *Watcher) SetStackSampleRate(rate int) {
	if rate < 0 {
		panic("finalizerwatch.Watcher.SetStackSampleRate: negative rate")
	}
	w.init()
	w.sampleRate.Store(int64(rate))
	w.sampleThreshold.Store(sampleThreshold(int64(rate)))
}

// appendStackSamples appends the sampled stacks of kind k to out (see
// StackSamples).
func (w *Watcher) appendStackSamples(out []StackSample, k Kind) []StackSample {
	rate := max(uint64(w.sampleRate.Load()), 1)
	w.samples.Range(func(key sampleKey, smp *stackSample) bool {
		if key.kind != k {
			return true
		}
		// Executed and cleared are read before registered, so that a
		// registration counted between the reads cannot make the
		// outstanding count negative.
		ex, cl := smp.executed.Load(), smp.cleared.Load()
		reg := smp.registered.Load()
		st := StackSample{
			Kind:     k,
			Site:     smp.site.siteFrame(),
			Stack:    smp.stack.Frames(),
			PCs:      smp.stack.PCs(),
			Rate:     int(rate),
			Sampled:  reg,
			Executed: ex * rate, Cleared: cl * rate, Registered: reg * rate,
		}
		if reg > ex+cl {
			st.Outstanding = (reg - ex - cl) * rate
		}
		out = append(out, st)
		return true
	})
	return out
}
