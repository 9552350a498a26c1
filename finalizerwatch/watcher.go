package finalizerwatch

import (
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
	"weak"

	"github.com/gcprobe/probe/internal/bounded"
	"github.com/gcprobe/probe/stackcapture"
)

// Watcher keeps the ledger of finalizers and cleanups registered through
// it. Its zero value is not usable; call New, or use Default through the
// package-level functions.
//
// A Watcher starts no goroutine. It learns of GC cycles from two sentinel
// objects, one with a finalizer and one with a cleanup, that re-arm
// themselves each time they run; Close stops them.
type Watcher struct {
	cfg config

	initOnce sync.Once
	sites    *bounded.Map[siteKey, site]
	stacks   *stackcapture.Table
	overflow [numKinds]site
	// stackEntries is how many entries full stacks may take in sites.
	stackEntries int

	// cycles[k] counts the GC cycles that the goroutine running kind k has
	// caught up with: it is bumped by that kind's sentinel. Ages measured in
	// these cycles do not grow for healthy objects merely because the queue
	// is backed up.
	cycles [numKinds]atomic.Uint32
	closed atomic.Bool
	full   atomic.Bool // capture every registration's full stack

	// rank is the per-cycle ranking that Read serves (snapshot.go);
	// rankMu guards it, and the read-side fields grp and next of every
	// site.
	rankMu sync.Mutex
	rank   ranking
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
	return w, nil
}

// init allocates the tables and arms the sentinels.
func (w *Watcher) init() {
	w.initOnce.Do(func() {
		w.sites = bounded.New[siteKey, site](w.cfg.maxSites)
		w.stacks, _ = stackcapture.NewTable(stackcapture.WithLimit(w.cfg.maxStacks))
		w.stackEntries = w.cfg.maxSites - w.cfg.maxSites/8
		for _, k := range Kinds {
			w.overflow[k].w, w.overflow[k].kind = w, k
		}
		wp := weak.Make(w)
		armFinalizerSentinel(wp)
		armCleanupSentinel(wp)
	})
}

// Close stops the watcher's GC-cycle sentinels from re-arming. The ledger
// stays readable, and registrations already made still count when they run;
// ages stop advancing. Close is idempotent. Closing Default is allowed but
// rarely what you want.
func (w *Watcher) Close() {
	w.closed.Store(true)
}

// Cycles returns how many GC cycles the goroutine that runs kind k has
// caught up with since the watcher's first registration: the clock that
// SiteStats.Survived is measured in.
func (w *Watcher) Cycles(k Kind) uint64 {
	if k >= numKinds {
		return 0
	}
	return uint64(w.cycles[k].Load())
}

// SuspectCycles returns the watcher's suspect threshold in GC cycles.
func (w *Watcher) SuspectCycles() int { return w.cfg.suspectCycles }

// FullStacks reports whether every registration captures its full stack.
func (w *Watcher) FullStacks() bool { return w.full.Load() }

// SetFullStacks turns full-stack capture on every registration on or off
// (see WithFullStacks), from the next registration on: a program can turn
// it on while it hunts a leak, as it would raise runtime.MemProfileRate.
func (w *Watcher) SetFullStacks(on bool) { w.full.Store(on) }

// sentinel objects are big enough and hold a pointer, so they are never
// tiny-allocated (a tiny block is freed only when all of it is).
type finSentinel struct {
	w weak.Pointer[Watcher]
	_ [2]uintptr
}

type cleanupSentinel struct {
	_ *int
	_ [2]uintptr
}

func armFinalizerSentinel(wp weak.Pointer[Watcher]) {
	runtime.SetFinalizer(&finSentinel{w: wp}, finalizerTick)
}

// finalizerTick runs on the finalizer goroutine after a GC cycle: a load,
// an add and an allocation, never a block.
func finalizerTick(s *finSentinel) {
	w := s.w.Value()
	if w == nil || w.closed.Load() {
		return
	}
	w.cycles[KindFinalizer].Add(1)
	armFinalizerSentinel(s.w)
}

func armCleanupSentinel(wp weak.Pointer[Watcher]) {
	runtime.AddCleanup(&cleanupSentinel{}, cleanupTick, wp)
}

func cleanupTick(wp weak.Pointer[Watcher]) {
	w := wp.Value()
	if w == nil || w.closed.Load() {
		return
	}
	w.cycles[KindCleanup].Add(1)
	armCleanupSentinel(wp)
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
		stk := w.stacks.Intern(pcs[:n])
		if !stk.Overflow() {
			key := siteKey{kind: k, stack: stk}
			// Interned stacks live as long as the table, so the pointer is a
			// stable identity to hash.
			h := stackcapture.HashPC(uintptr(unsafe.Pointer(stk))) ^ uint64(k)
			if s := w.sites.Get(h, key); s != nil {
				return s
			}
			// New stacks may take only part of the table: the rest is kept
			// for site entries, so that once stacks no longer fit, every
			// registration is still counted at its own site.
			if w.sites.Len() < w.stackEntries {
				if s := w.sites.LoadOrInit(h, key, func(s *site) { w.initSite(s, k, 0, stk) }); s != nil {
					return s
				}
			}
		}
		// No room for the stack: count the registration at its site.
	}
	key := siteKey{kind: k, pc: pc}
	h := stackcapture.HashPC(pc) ^ uint64(k)
	s := w.sites.Get(h, key)
	if s == nil {
		// First registration through this PC. The caller's frame is a
		// wrapper when the user called through a method value or
		// reflection (the method value's -fm wrapper, runtime.call32):
		// then the entry is marked so, and registrations through it look
		// further up the stack for the user's line.
		if !stackcapture.Indirect(pc) {
			// Keep the first registration's stack as the site's
			// representative.
			var pcs [stackcapture.MaxDepth]uintptr
			n := stackcapture.Callers(skip+1, pcs[:])
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
	key := siteKey{kind: k, pc: pc}
	h := stackcapture.HashPC(pc) ^ uint64(k)
	if s := w.sites.Get(h, key); s != nil {
		return s
	}
	stk := w.stacks.Intern(pcs[i:n])
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

// account records a new registration at s and returns its cycle.
func (w *Watcher) account(s *site) uint32 {
	cyc := w.cycles[s.kind].Load()
	s.registered.Add(1)
	s.ages.add(cyc)
	return cyc
}

// unaccount undoes account for a registration the runtime refused.
func (w *Watcher) unaccount(s *site, cyc uint32) {
	s.registered.Add(^uint64(0))
	s.ages.remove(cyc, w.cycles[s.kind].Load())
}
