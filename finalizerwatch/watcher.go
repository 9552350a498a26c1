package finalizerwatch

import (
	"slices"
	"sync"
	"sync/atomic"
	"weak"

	"github.com/gcprobe/probe/internal/bounded"
	"github.com/gcprobe/probe/internal/gcclock"
	"github.com/gcprobe/probe/stackcapture"
)

// Watcher keeps the ledger of finalizers and cleanups registered through
// it. Its zero value is not usable; call New, or use Default through the
// package-level functions.
//
// A Watcher keeps no goroutine of its own. It learns of GC cycles from the
// process's one GC-cycle clock (internal/gcclock: a sentinel object with a finalizer
// and one with a cleanup, re-arming themselves each time they run), shared
// with memstats; Close stops the watcher's count of them. The two
// goroutines finalizerwatch starts are short-lived: when the address table
// has shards to shrink after a burst, a GC cycle starts a pass over them
// off the finalizer goroutine, which ends when it has looked at each; and
// while Cleanup.Stops wait to be settled, one looks every millisecond or
// so for the runtime's cleanup queue to empty, and ends when none waits.
type Watcher struct {
	cfg config

	initOnce sync.Once
	sites    *bounded.Map[siteKey, site]
	stacks   *stackcapture.Table
	overflow [numKinds]site
	// stackEntries is how many entries full stacks may take in sites.
	stackEntries int

	// cycles[k] counts the GC cycles that the goroutine running kind k has
	// caught up with since the watcher's first registration: the shared
	// clock's chain of that kind bumps it (see clockListener). Ages
	// measured in these cycles do not grow for healthy objects merely
	// because the queue is backed up. A per-watcher copy, not the clock's
	// own count, so that the hot path reads it with one atomic load
	// (cycle) and Close can freeze it.
	cycles [numKinds]atomic.Uint32
	// epochs are the times the cycles began, with a suspect age
	// (epoch.go).
	epochs [numKinds]epochClock
	// age is the suspect age in nanoseconds (WithSuspectAge,
	// SetSuspectAge); ageMu orders its changes.
	age    atomic.Int64
	ageMu  sync.Mutex
	clock  atomic.Pointer[gcclock.Subscription]
	closed atomic.Bool
	full   atomic.Bool // capture every registration's full stack
	// stacksRefused counts full stacks not kept because the site table
	// had no room left for stack entries.
	stacksRefused atomic.Uint64

	// Sampled full stacks (sample.go): the rate, and the table of sampled
	// stacks.
	sampleRate      atomic.Int64
	sampleThreshold atomic.Uint64 // sampleThreshold(sampleRate)
	samples         *bounded.Map[sampleKey, stackSample]

	// rank is the per-cycle ranking that Read serves (snapshot.go);
	// rankMu guards it, and the read-side fields grp and next of every
	// site.
	rankMu sync.Mutex
	rank   ranking

	// running records the callbacks running now (running.go).
	running runSlots
}

// Default is the Watcher behind the package-level SetFinalizer and
// AddCleanup. It uses the default options.
var Default = mustNew()

func mustNew() *Watcher {
	w, err := New()
	if err != nil {
		panic(err)
	}
	return w
}

// New returns a Watcher configured by opts. Its tables are allocated on the
// first registration.
func New(opts ...Option) (*Watcher, error) {
	w := &Watcher{cfg: defaultConfig()}
	if err := w.cfg.apply(opts); err != nil {
		return nil, err
	}
	w.full.Store(w.cfg.fullStacks)
	w.age.Store(int64(w.cfg.suspectAge))
	w.sampleRate.Store(int64(w.cfg.stackSampleRate))
	w.sampleThreshold.Store(sampleThreshold(int64(w.cfg.stackSampleRate)))
	return w, nil
}

// init allocates the tables and arms the sentinels.
func (w *Watcher) init() {
	w.initOnce.Do(func() {
		w.sites = bounded.New[siteKey, site](w.cfg.maxSites)
		w.stacks, _ = stackcapture.NewTable(stackcapture.WithLimit(w.cfg.maxStacks))
		w.samples = bounded.New[sampleKey, stackSample](w.cfg.maxStacks) // bounded like the stacks it points into
		w.running.init(w.cfg.maxSites)
		w.stackEntries = w.cfg.maxSites - w.cfg.maxSites/8
		for _, k := range Kinds {
			w.overflow[k].w, w.overflow[k].kind = w, k
		}
		w.ageMu.Lock()
		w.resetEpochs(w.cfg.now())
		w.ageMu.Unlock()
		w.clock.Store(gcclock.Subscribe(clockListener{weak.Make(w)}))
	})
}

// Close stops the watcher's count of GC cycles: its clock (Cycles) and
// so its ledger's ages stop advancing, frozen where they are, and it lets
// go of the process's GC-cycle clock (whose sentinels stop once no watcher
// or sampler uses it). The ledger stays readable, and registrations
// already made still count when they run. Close is idempotent. Closing
// Default is allowed but rarely what you want.
func (w *Watcher) Close() {
	w.closed.Store(true)
	if s := w.clock.Load(); s != nil {
		s.Cancel()
	}
}

// cycleCount returns how many GC cycles the goroutine that runs kind k has
// caught up with since the watcher's first registration: the clock that
// SiteStats.Survived is measured in.
func (w *Watcher) cycleCount(k Kind) uint64 {
	if k >= numKinds {
		return 0
	}
	return uint64(w.cycle(k))
}

// cycle is Cycles for the hot path: one atomic load. k must be valid.
func (w *Watcher) cycle(k Kind) uint32 { return w.cycles[k].Load() }

// SuspectCycles returns the watcher's suspect threshold in GC cycles.
func (w *Watcher) SuspectCycles() int { return w.cfg.suspectCycles }

// FullStacks reports whether every registration captures its full stack.
func (w *Watcher) FullStacks() bool { return w.full.Load() }

// SetFullStacks turns full-stack capture on every registration on or off
// (see WithFullStacks), from the next registration on: a program can turn
// it on while it hunts a leak, as it would raise runtime.MemProfileRate.
func (w *Watcher) SetFullStacks(on bool) { w.full.Store(on) }

// clockListener counts the shared clock's ticks into a watcher's cycles.
// It holds the watcher weakly, so that a watcher dropped without Close is
// collected, and its subscription ends at the next tick.
type clockListener struct{ w weak.Pointer[Watcher] }

// Tick runs on the finalizer goroutine (or a cleanup goroutine) once per GC
// cycle: a weak-pointer load, a load and an add, and the address table's
// check for shards to shrink (an atomic load), never a block.
func (l clockListener) Tick(k gcclock.Kind) bool {
	w := l.w.Value()
	if w == nil || w.closed.Load() {
		return false
	}
	switch k {
	case gcclock.Finalizer:
		w.tick(KindFinalizer, w.cfg.now())
		objs.tickIdle()
	case gcclock.Cleanup:
		w.tick(KindCleanup, w.cfg.now())
	}
	return true
}

// pcKey returns the site-table hash and key of the site entry of kind k
// for the call site pc.
func pcKey(k Kind, pc uintptr) (uint64, siteKey) {
	return stackcapture.HashPC(pc) ^ uint64(k), siteKey{kind: k, pc: pc}
}

// stackKey returns the site-table hash and key of the stack entry of kind
// k (full stacks) for the stack pcs.
func stackKey(k Kind, pcs []uintptr) (uint64, siteKey) {
	h := stackcapture.HashPCs(pcs)
	return h ^ uint64(k), siteKey{kind: k, hash: h}
}

// siteFor returns the ledger entry for a registration of kind k whose call
// site is pc. Only the site is captured on the hot path; a new site (or,
// with full stacks, every registration) captures the stack too. skip is the
// frame count from siteFor's caller to the user's frame, so that the stack
// starts at the user's call.
//
//go:noinline
func (w *Watcher) siteFor(k Kind, pc uintptr, skip int) *site {
	if w.full.Load() {
		var pcs [stackcapture.MaxDepth]uintptr
		n := stackcapture.Callers(skip+1, pcs[:])
		h, key := stackKey(k, pcs[:n])
		s := w.sites.Get(h, key)
		// New stacks may take only part of the table: the rest is kept
		// for site entries, so that once stacks no longer fit, every
		// registration is still counted at its own site.
		if s == nil {
			if w.sites.Len() < w.stackEntries {
				// A stack not seen before: captured again, checked
				// against runtime.Callers, before it is kept.
				n = stackcapture.CallersChecked(skip+1, pcs[:])
				h, key = stackKey(k, pcs[:n])
				if stk := w.stacks.Intern(pcs[:n]); !stk.Overflow() {
					s = w.sites.LoadOrInit(h, key, func(s *site) { w.initSite(s, k, 0, stk) })
				}
			} else {
				w.stacksRefused.Add(1)
			}
		}
		if s != nil && slices.Equal(s.stack.PCs(), pcs[:n]) {
			return s
		}
		// No room for the stack: count the registration at its site.
	}
	h, key := pcKey(k, pc)
	s := w.sites.Get(h, key)
	if s == nil {
		if w.sites.Len() >= w.sites.Limit() {
			// The table is full: the registration is counted under the
			// overflow site, and capturing its stack would be wasted.
			return &w.overflow[k]
		}
		// First registration through this PC. The caller's frame is a
		// wrapper when the user called through a method value or
		// reflection (the method value's -fm wrapper, runtime.call32):
		// then the entry is marked so, and registrations through it look
		// further up the stack for the user's line.
		if !stackcapture.Indirect(pc) {
			// Keep the first registration's stack as the site's
			// representative.
			var pcs [stackcapture.MaxDepth]uintptr
			n := stackcapture.CallersChecked(skip+1, pcs[:])
			stk := w.stacks.Intern(pcs[:n])
			if s = w.sites.LoadOrInit(h, key, func(s *site) { w.initSite(s, k, pc, stk) }); s == nil {
				return &w.overflow[k]
			}
			return s
		}
		s = w.sites.LoadOrInit(h, key, func(s *site) { s.w, s.kind, s.pc, s.indirect = w, k, pc, true })
	}
	if s == nil || s.indirect {
		return w.indirectSite(k)
	}
	return s
}

// indirectSite finds the site of a registration made through a wrapper: the
// first frame of the stack outside gcprobe, the runtime, reflection and
// compiler-generated wrappers. It costs a runtime.Callers, which is why the
// direct path does not take it.
//
//go:noinline
func (w *Watcher) indirectSite(k Kind) *site {
	var pcs [stackcapture.MaxDepth]uintptr
	n := stackcapture.Callers(1, pcs[:])
	i := 0
	for i < n-1 && stackcapture.Indirect(pcs[i]) {
		i++
	}
	pc := pcs[i]
	h, key := pcKey(k, pc)
	if s := w.sites.Get(h, key); s != nil {
		return s
	}
	// The stack keeps the helpers looked through (callers.go) below the
	// site, as a user reads it.
	j := i
	for j > 0 && stackcapture.LookedThrough(pcs[j-1]) {
		j--
	}
	stk := w.stacks.Intern(pcs[j:n])
	if s := w.sites.LoadOrInit(h, key, func(s *site) { w.initSite(s, k, pc, stk) }); s != nil {
		return s
	}
	return &w.overflow[k]
}

func (w *Watcher) initSite(s *site, k Kind, pc uintptr, stk *stackcapture.Stack) {
	s.w, s.kind, s.pc, s.stack = w, k, pc, stk
	cur := w.cycles[k].Load()
	s.ages.base.Store(cur)
}

// account records a new registration at s and returns its cycle: one
// atomic add, and on the entry's first registration in a cycle (or one
// that loaded an older clock) a fold of the ring under its lock and the
// check of its caller (callers.go).
func (w *Watcher) account(s *site) (cyc uint32) {
	cyc = w.enterCycle(s)
	s.addReg(cyc)
	return cyc
}

// enterCycle returns the current GC cycle of s's kind, folding s's ring
// and observing s for the growth model on its first registration in it.
func (w *Watcher) enterCycle(s *site) (cyc uint32) {
	cyc = w.cycles[s.kind].Load()
	if cyc != s.ages.seen.Load() {
		s.newCycle(cyc)
		w.checkCaller(s)
	}
	return cyc
}

// unaccount undoes account, and the sample's count, for a registration
// the runtime refused.
func (w *Watcher) unaccount(s *site, smp *stackSample, cyc uint32) {
	if smp != nil {
		smp.registered.Add(^uint64(0))
	}
	s.unaccount(cyc)
}
