package finalizerwatch

import (
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/gcprobe/probe/stackcapture"
)

// SetFinalizer is runtime.SetFinalizer with the registration counted at
// its call site in Default's ledger. Its semantics are the runtime's: obj
// must be a pointer to an object allocated by calling new, by taking the
// address of a composite literal, or by taking the address of a local
// variable; finalizer is a function taking a single argument to which obj's
// type can be assigned, and may have arbitrary ignored return values; a nil
// finalizer clears the finalizer set on obj. See runtime.SetFinalizer for
// when and where finalizers run.
//
// Where the runtime would end the program with an unrecoverable fatal error
// for a bad argument (obj nil, a nil pointer or not a pointer, finalizer not
// a function or of a type obj cannot be passed to), SetFinalizer panics
// instead, with a message that begins "finalizerwatch.SetFinalizer:" and
// names the problem. Three runtime checks it cannot make before the
// runtime does remain fatal: obj pointing into the middle of an
// allocation, obj pointing to memory not from the Go heap (C or mapped
// memory; a global is ignored, as by the runtime), and a finalizer already
// set on obj directly with runtime.SetFinalizer.
//
// Setting a finalizer on an object that has one ends the program, as the
// runtime does ("finalizer already set"), whether that finalizer was set
// through finalizerwatch or directly: the runtime gives the answer, and a
// finalizer the user set is never discarded. A registration whose
// finalizer was cleared directly with runtime.SetFinalizer, or whose
// object was freed and its address reused, counts as outstanding until
// its address is registered again, then as cleared
// (SiteStats.ClearedOutside); it keeps nothing of the user's alive.
//
// The watcher keeps no reference to obj and adds a table deletion, a
// clock read and a few atomic operations to each finalizer run.
//
//go:noinline
func SetFinalizer(obj any, finalizer any) {
	if finalizer == nil {
		clearFinalizer(obj) // a clear is counted where it was set: no PC
		return
	}
	Default.setFinalizer(obj, finalizer, stackcapture.CallerPC(1))
}

// SetFinalizer is the package-level SetFinalizer, counted in w's ledger.
//
//go:noinline
func (w *Watcher) SetFinalizer(obj any, finalizer any) {
	if finalizer == nil {
		clearFinalizer(obj)
		return
	}
	w.setFinalizer(obj, finalizer, stackcapture.CallerPC(1))
}

// callKind says how the wrapper calls the user's finalizer: directly where
// its type allows, through reflection otherwise.
type callKind uint8

const (
	callAny     callKind = iota // func(any)
	callPointer                 // func(*T) with no results: called as func(unsafe.Pointer)
	callReflect                 // anything else the runtime accepts

	// callSampled marks a finEntry whose registration was sampled: its ref
	// is a *stackSample (see sample.go).
	callSampled callKind = 0x80
)

type eface struct {
	typ, data unsafe.Pointer
}

// dataOf returns the data word of an interface holding a pointer-shaped
// value: the pointer itself.
func dataOf(x *any) unsafe.Pointer { return (*eface)(unsafe.Pointer(x)).data }

// zeroBase is the address the runtime gives every zero-size allocation
// (runtime.zerobase). The runtime ignores a finalizer set there, as on any
// address outside the heap, since all zero-size objects share it.
var zeroBase = reflect.New(reflect.TypeFor[struct{}]()).Pointer()

// setFinalizer is SetFinalizer with a finalizer that is not nil (a clear
// is clearFinalizer), made at pc.
//
//go:noinline
func (w *Watcher) setFinalizer(obj, finalizer any, pc uintptr) {
	addr := uintptr(dataOf(&obj))
	if addr != 0 {
		if c, ok := callCache.get(&obj, &finalizer); ok {
			w.set(obj, finalizer, addr, c, pc)
			return
		}
	}
	call := finalizerCall("finalizerwatch.SetFinalizer", checkObj(obj), finalizer)
	callCache.put(&obj, &finalizer, call)
	w.set(obj, finalizer, addr, call, pc)
}

// checkObj returns obj's type, and panics where runtime.SetFinalizer would
// end the program: obj nil, not a pointer, or a nil pointer.
func checkObj(obj any) reflect.Type {
	const fn = "finalizerwatch.SetFinalizer"
	if obj == nil {
		panic(fn + ": first argument is nil")
	}
	ot := reflect.TypeOf(obj)
	if ot.Kind() != reflect.Pointer {
		panic(fn + ": first argument is " + ot.String() + ", not pointer")
	}
	if dataOf(&obj) == nil {
		// The runtime throws "pointer not in allocated block".
		panic(fn + ": first argument is a nil " + ot.String())
	}
	return ot
}

// clearFinalizer is SetFinalizer(obj, nil): the registration, made
// through any Watcher, is counted as cleared at the site it was made at.
//
// The table and the runtime are changed under the lock of the address's
// shard, as set does, so that a clear racing a set of the same object
// cannot take the set's entry before the set reaches the runtime: the
// ledger would count the registration cleared while the runtime still held
// the watcher's finalizer, and the next set would end the program
// ("finalizer already set").
func clearFinalizer(obj any) {
	checkObj(obj)
	sh, h := objs.lock(uintptr(dataOf(&obj)))
	e, ok := objs.takeLocked(sh, h, uintptr(dataOf(&obj)))
	runtime.SetFinalizer(obj, nil)
	sh.mu.Unlock()
	if ok {
		e.cleared()
	}
}

// set registers finalizer, whose arguments passed finalizerCall's checks,
// on obj at addr.
//
//go:noinline
func (w *Watcher) set(obj, finalizer any, addr uintptr, call callKind, pc uintptr) {
	if checkFinalizers() {
		verifyFinalizer(obj, finalizer)
	}
	if addr == zeroBase {
		runtime.SetFinalizer(obj, finalizer) // ignored: see zeroBase
		return
	}
	w.init()
	s := w.siteFor(KindFinalizer, pc, 3)
	cyc := w.account(s)
	var smp *stackSample
	if w.sampleNow() {
		if smp = w.sample(s, 3); smp != nil {
			call |= callSampled
		}
	}
	e := finEntry{ref: entryRef(s, smp), cyc: cyc, call: call}
	var fin any = runFinalizer
	if inImage(dataOf(&finalizer)) {
		e.fn = finFunc(finalizer, call)
	} else {
		fin = heldFinalizer(finalizer, call)
	}
	// The entry and the runtime's finalizer change together, under the
	// lock of the address's shard (see clearFinalizer). The runtime gives
	// its own answer to a finalizer already set on obj: it ends the
	// program (mfinal.go, SetFinalizer: addfinalizer finds a finalizer
	// special and it throws "finalizer already set"), whether that
	// finalizer is the watcher's or one set directly, which the watcher
	// must never discard. An entry found here is one the runtime no longer
	// holds (cleared directly, or its object freed and the address
	// reused), or the runtime would not have returned: it counts as
	// cleared outside.
	sh, h := objs.lock(addr)
	old, replaced := objs.putLocked(sh, h, addr, e)
	runtime.SetFinalizer(obj, fin)
	sh.mu.Unlock()
	if replaced {
		old.site().addRare(rareClearedOutside, 1)
		old.cleared()
	}
}

// rareClearedOutside is ClearedOutside's slot in a site's rare table.
var rareClearedOutside = rareSlot("cleared_outside")

// heldFinalizer returns the finalizer the runtime is given for the user's
// finalizer when that is a closure on the heap: a closure that holds it,
// so that the runtime, not the address table, keeps it alive, exactly as
// long as the runtime would keep it itself (the GC marks a finalizer
// special's fn as a root, mgcmark.go markrootSpans, until the special is
// removed by a clear, mfinal.go removefinalizer, or queued to run). A
// finalizer cleared directly
// with runtime.SetFinalizer leaves its table entry behind (nothing tells
// the watcher); were the user's closure in the entry, it would stay in
// memory until the address is registered again, with all it reaches, the
// object too if the closure reaches it (issue 26, item 4). It costs one
// allocation, the closure, beside the user's own; a finalizer in the
// executable's image (a function, a method expression, a literal that
// captures nothing) is never freed and stays in the table at no cost (see
// inImage).
func heldFinalizer(finalizer any, call callKind) any {
	if call&^callSampled == callReflect {
		return holdReflect(finalizer)
	}
	return holdFunc(dataOf(&finalizer))
}

// holdFunc and holdReflect make heldFinalizer's closure, one allocation:
// functions of their own, so that the closure captures its variable by
// value (heldFinalizer takes finalizer's address, which would move it to
// the heap too).
func holdFunc(fn unsafe.Pointer) any { return func(obj any) { runHeld(obj, fn) } }

func holdReflect(finalizer any) any { return func(obj any) { runHeldReflect(obj, finalizer) } }

// runHeld is the run of a finalizer that heldFinalizer holds, fn its func
// value.
func runHeld(obj any, fn unsafe.Pointer) {
	if e, ok := objs.take(uintptr(dataOf(&obj))); ok {
		e.run(obj, fn)
	} else {
		orphanRuns.Add(1) // cannot happen, as in runFinalizer
	}
}

// runHeldReflect is runHeld for a finalizer called through reflection.
func runHeldReflect(obj, finalizer any) {
	if e, ok := objs.take(uintptr(dataOf(&obj))); ok {
		e.run(obj, unsafe.Pointer(&finalizer))
	} else {
		orphanRuns.Add(1)
	}
}

// imageLo and imageHi bound the executable's static image, exclusive: the
// address of a function's code, in the text section, and of a variable in
// the last section, noptrbss. The linker lays out every format it writes
// in the order text, rodata, data (noptrdata, data, bss, noptrbss), so a
// func value the compiler made statically (a function's, or a literal's
// that captures nothing, in rodata) lies in between, and the heap never
// does: it is mapped in arenas of 64 MiB, apart from the image. A func
// value of another module (a plugin) falls outside and is treated as a
// heap closure, which costs an allocation but is correct. Both are 0,
// and every closure is held by the runtime, if the check of that layout
// at start-up fails.
var imageLo, imageHi = imageBounds()

// imageEnd is a zero variable without pointers: the linker puts it in
// noptrbss.
var imageEnd [8]byte

func imageBounds() (lo, hi uintptr) {
	lo = reflect.ValueOf(imageBounds).Pointer()
	hi = uintptr(unsafe.Pointer(&imageEnd))
	var static any = runFinalizer
	imageProbe = new([64]byte) // on the heap: it escapes
	if p, q := uintptr(dataOf(&static)), uintptr(unsafe.Pointer(imageProbe)); !(lo < p && p < hi) || (lo < q && q < hi) {
		return 0, 0
	}
	return lo, hi
}

// imageProbe is a heap object imageBounds checks is outside the bounds.
var imageProbe *[64]byte

// inImage reports whether p, a func value, is in the executable's image
// (see imageLo).
func inImage(p unsafe.Pointer) bool { return imageLo < uintptr(p) && uintptr(p) < imageHi }

// finFunc returns what a finEntry keeps of finalizer, whose call kind is
// call: the func value itself (its data word, a pointer to the closure)
// where the kind says its type (a func(any), or a func(*T) called as a
// func(unsafe.Pointer)), so that the entry needs no type word; a pointer
// to a copy of the interface for a finalizer called through reflection,
// which needs its type. Only that kind allocates, and its runs allocate
// anyway (reflect.Value.Call).
func finFunc(finalizer any, call callKind) unsafe.Pointer {
	if call&^callSampled == callReflect {
		p := new(any)
		*p = finalizer
		return unsafe.Pointer(p)
	}
	return dataOf(&finalizer)
}

// cleared counts the entry's registration as cleared.
func (e *finEntry) cleared() { countCleared(KindFinalizer, e.site(), e.sample(), e.cyc) }

// verifyFinalizer panics if finalizer is a closure that holds a pointer
// into obj's allocation: obj can then never be collected, and its finalizer
// never run. The runtime accepts such a finalizer, but with
// GODEBUG=checkfinalizers=1 it ends the program at the next GC cycle, having
// found the object reachable from its own finalizer. Through finalizerwatch
// the runtime cannot see that (it holds runFinalizer; the user's closure
// sits in the watcher's table), so in that mode the watcher checks at
// registration, the direct case only. The check is the one
// runtime.AddCleanup makes of its cleanup function: the closure is
// registered as a cleanup on obj, never to run, and stopped at once.
func verifyFinalizer(obj, finalizer any) {
	defer func() {
		// Any other complaint (obj outside the heap) is runtime.SetFinalizer's
		// to make.
		if p := recover(); p != nil && strings.Contains(fmt.Sprint(p), "closes over ptr") {
			panic("finalizerwatch.SetFinalizer: finalizer closes over obj, finalizer will never run (found with GODEBUG=checkfinalizers)")
		}
	}()
	fv := dataOf(&finalizer)
	f := *(*func(uintptr))(unsafe.Pointer(&fv)) // never called
	runtime.AddCleanup((*byte)(dataOf(&obj)), f, 0).Stop()
	runtime.KeepAlive(obj)
}

// typeCache remembers, for pairs of an object type and a finalizer type
// that passed finalizerCall, how to call the finalizer, so that a
// registration with types seen before makes no reflection calls. It is a
// fixed array of immutable entries replaced whole: bounded, and read with
// one atomic load. Two pairs that hash alike take turns in a slot.
type typeCache struct {
	slots [256]atomic.Pointer[typePair]
}

type typePair struct {
	obj, fin unsafe.Pointer // the interfaces' type words
	call     callKind
}

var callCache typeCache

func typeWord(x *any) unsafe.Pointer { return (*eface)(unsafe.Pointer(x)).typ }

func (c *typeCache) slot(ot, ft unsafe.Pointer) *atomic.Pointer[typePair] {
	h := (uint64(uintptr(ot))*0x9e3779b97f4a7c15 ^ uint64(uintptr(ft))) * 0x9e3779b97f4a7c15
	return &c.slots[h>>(64-8)]
}

// get returns the call kind of obj's and finalizer's types if the pair was
// checked before.
func (c *typeCache) get(obj, finalizer *any) (callKind, bool) {
	ot, ft := typeWord(obj), typeWord(finalizer)
	if p := c.slot(ot, ft).Load(); p != nil && p.obj == ot && p.fin == ft {
		return p.call, true
	}
	return 0, false
}

func (c *typeCache) put(obj, finalizer *any, call callKind) {
	ot, ft := typeWord(obj), typeWord(finalizer)
	c.slot(ot, ft).Store(&typePair{obj: ot, fin: ft, call: call})
}

// finalizerCall checks finalizer the way runtime.SetFinalizer does, but
// panics (recoverably) where the runtime throws.
func finalizerCall(fn string, ot reflect.Type, finalizer any) callKind {
	if _, ok := finalizer.(func(any)); ok {
		return callAny
	}
	ft := reflect.TypeOf(finalizer)
	if ft.Kind() != reflect.Func {
		panic(fn + ": second argument is " + ft.String() + ", not a function")
	}
	if ft.IsVariadic() {
		panic(fn + ": cannot pass " + ot.String() + " to finalizer " + ft.String() + " because dotdotdot")
	}
	if ft.NumIn() != 1 {
		panic(fn + ": cannot pass " + ot.String() + " to finalizer " + ft.String())
	}
	in := ft.In(0)
	switch {
	case in == ot,
		in.Kind() == reflect.Pointer && (!hasUncommon(in) || !hasUncommon(ot)) && in.Elem() == ot.Elem():
		if ft.NumOut() == 0 {
			return callPointer
		}
		return callReflect
	case in.Kind() == reflect.Interface && ot.Implements(in):
		return callReflect
	}
	panic(fn + ": cannot pass " + ot.String() + " to finalizer " + ft.String())
}

// hasUncommon reports whether t has the runtime's "uncommon" type data:
// whether it is named or has methods, unexported ones included (which
// reflect does not count). runtime.SetFinalizer accepts a finalizer whose
// parameter is a pointer type other than obj's, with the same element
// type, only if one of the two has none (mfinal.go: "one or the other is
// unnamed", tested as fint.Uncommon() == nil || etyp.Uncommon() == nil):
// so a named pointer type P is refused for a *T whose T has methods.
// The flag is read from the type's header (internal/abi.Type: Size_,
// PtrBytes, Hash, then TFlag, whose bit TFlagUncommon is 1), as
// TestHasUncommon checks against types whose answer the compiler's rule
// fixes.
func hasUncommon(t reflect.Type) bool {
	const tflagUncommon = 1 << 0
	hdr := dataOf((*any)(unsafe.Pointer(&t))) // t's *rtype, an *abi.Type
	return *(*uint8)(unsafe.Add(hdr, 2*unsafe.Sizeof(uintptr(0))+4))&tflagUncommon != 0
}

// runFinalizer is the finalizer the runtime holds for every object
// registered through finalizerwatch. It finds the user's finalizer by the
// object's address, calls it, and counts the run. If the user's finalizer
// panics the program crashes exactly as it would without the watcher; the
// run is not counted.
func runFinalizer(obj any) {
	e, ok := objs.take(uintptr(dataOf(&obj)))
	if !ok {
		// Cannot happen: the entry lives as long as the finalizer (see
		// clearFinalizer). Counted for the tests that race sets and
		// clears.
		orphanRuns.Add(1)
		return
	}
	e.run(obj, e.fn)
}

// orphanRuns counts the runs of the watcher's finalizer that found no
// entry: the table and the runtime disagreed, which they must not.
var orphanRuns atomic.Uint64

// run calls the user's finalizer fn (as finFunc keeps it) on obj, whose
// entry e was taken from the table, and counts the run.
func (e *finEntry) run(obj any, fn unsafe.Pointer) {
	start := monoNow()
	site := e.site()
	slot := site.w.begin(KindFinalizer, site, start)
	switch e.call &^ callSampled {
	case callAny:
		f := *(*func(any))(unsafe.Pointer(&fn))
		f(obj)
	case callPointer:
		// A func(*T) with no results has the calling convention of a
		// func(unsafe.Pointer): call it without reflection.
		f := *(*func(unsafe.Pointer))(unsafe.Pointer(&fn))
		f(dataOf(&obj))
	default:
		reflect.ValueOf(*(*any)(fn)).Call([]reflect.Value{reflect.ValueOf(obj)})
	}
	end(slot)
	site.executed.Add(1)
	site.done(KindFinalizer, e.cyc)
	if timed() {
		site.dur.observe(time.Duration(monoNow() - start))
	}
	if smp := e.sample(); smp != nil {
		smp.executed.Add(1)
	}
}
