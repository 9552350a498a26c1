package finalizerwatch

import (
	"math"
	"math/rand/v2"
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
// draws are made per site as the gaps between sampled registrations: the
// gaps of independent draws with probability p are geometric, so each site
// keeps the registration count at which its next sample falls
// (site.nextSample), and a registration compares its count, which it gets
// from the counter it adds to anyway, with that. A random number is drawn
// once per sample, not once per registration.

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

// sampleNow reports whether the registration that made s's registered
// count n captures its full stack: one load and a compare, inlined into the
// registration paths; one registration in rate, and each site's first,
// goes on to sampleDue.
func (w *Watcher) sampleNow(s *site, n uint64) bool {
	return n >= s.nextSample.Load() && w.sampleDue(s, n)
}

// sampleDue is sampleNow's slow path.
func (w *Watcher) sampleDue(s *site, n uint64) bool {
	for {
		at := s.nextSample.Load()
		if at > n {
			return false // a racing registration took the sample
		}
		rate := w.sampleRate.Load()
		var next uint64
		due := false
		switch {
		case rate <= 0:
			next = math.MaxUint64 // off until SetStackSampleRate
		case at == 0:
			// No sample drawn yet (a new site, or a new rate): the first
			// sampled registration is the gap's, counting this one.
			if next = n - 1 + sampleGap(rate); next == n {
				due, next = true, n+sampleGap(rate)
			}
		default:
			// This registration reached the count drawn: sample it. A
			// registration racing for the same count loses the swap below.
			due, next = true, n+sampleGap(rate)
		}
		if s.nextSample.CompareAndSwap(at, next) {
			// With full stacks every stack is kept anyway: the draws go
			// on, so that turning them off samples from then on.
			return due && !w.full.Load()
		}
	}
}

// sampleGap draws the number of registrations up to and including the next
// sampled one, when each is sampled with probability 1/rate: geometric,
// 1 at rate 1.
func sampleGap(rate int64) uint64 {
	if rate == 1 {
		return 1
	}
	u := 1 - rand.Float64() // (0, 1]
	g := math.Floor(math.Log(u)/math.Log1p(-1/float64(rate))) + 1
	return uint64(min(g, 1<<40))
}

// resetSampling makes every site draw its next sample anew, at the rate
// now in force.
func (w *Watcher) resetSampling() {
	for k := range w.overflow {
		w.overflow[k].nextSample.Store(0)
	}
	w.sites.Range(func(_ siteKey, s *site) bool {
		s.nextSample.Store(0)
		return true
	})
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
	w.resetSampling()
}

// StackSamples returns the sampled stacks of kind k, in no particular
// order, with counts scaled by the sample rate. It is empty if sampling is
// off (and was never on) or with WithFullStacks, where every stack is kept
// exactly (see Stacks).
func (w *Watcher) StackSamples(k Kind) []StackSample {
	w.init()
	rate := max(uint64(w.sampleRate.Load()), 1)
	var out []StackSample
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
