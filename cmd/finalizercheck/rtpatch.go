package main

// The runtime build mode's patch, declared as data: each join point names
// a file of package runtime, what it is (for the refusal message), the
// exact text the patch expects to find there once, and the text that
// replaces it. A join point not found exactly once refuses the whole
// patch: finalizercheck never builds a runtime it did not verify. The
// advice is kept to a call of a hook in gcprobe_hooks.go (rtpatch/) and
// the token's plumbing; everything with logic is finalizerwatch's.
//
// Verified against go1.26's and go1.27's runtime (mfinal.go, mheap.go,
// mcleanup.go, proc.go, runtime2.go, mgc.go, mprof.go; runtime/debug's
// garbage.go, checked only).

// joinPoint is one change to a file of package runtime, or, where advice
// is find, a check of what the patch relies on there without changing it
// (a file only checked is not written).
type joinPoint struct {
	file   string // in $GOROOT/src/runtime: a base name, or debug/... for runtime/debug
	what   string
	find   string
	advice string
}

var joinPoints = []joinPoint{
	{
		file: "mfinal.go",
		what: "SetFinalizer's clear (removefinalizer under systemstack, then return)",
		find: `		systemstack(func() {
			removefinalizer(e.data)

			if debug.checkfinalizers != 0 {
				clearFinalizerContext(uintptr(e.data))
				KeepAlive(e.data)
			}
		})
		return
`,
		advice: `		var gcprobeNret uintptr
		systemstack(func() {
			gcprobeNret = removefinalizer(e.data)

			if debug.checkfinalizers != 0 {
				clearFinalizerContext(uintptr(e.data))
				KeepAlive(e.data)
			}
		})
		gcprobeFinalizerCleared(gcprobeNret)
		return
`,
	},
	{
		file: "mfinal.go",
		what: "SetFinalizer's registration (addfinalizer under systemstack)",
		find: `	callerpc := sys.GetCallerPC()
	systemstack(func() {
		if !addfinalizer(e.data, (*funcval)(f.data), nret, fint, ot) {
`,
		advice: `	callerpc := sys.GetCallerPC()
	nret = gcprobeFinalizerSet(ot, nret, callerpc)
	systemstack(func() {
		if !addfinalizer(e.data, (*funcval)(f.data), nret, fint, ot) {
`,
	},
	{
		file: "mfinal.go",
		what: "the finalizer goroutine's frame size (framesz from f.nret)",
		find: `				framesz := unsafe.Sizeof((any)(nil)) + f.nret
`,
		advice: `				gcprobeRun := gcprobeFinalizerStart(f.nret)
				framesz := unsafe.Sizeof((any)(nil)) + gcprobeNret(f.nret)
`,
	},
	{
		file: "mfinal.go",
		what: "the finalizer goroutine's call (reflectcall between the fingRunningFinalizer flags)",
		find: `				fingStatus.Or(fingRunningFinalizer)
				reflectcall(nil, unsafe.Pointer(f.fn), frame, uint32(framesz), uint32(framesz), uint32(framesz), &regs)
				fingStatus.And(^fingRunningFinalizer)
`,
		advice: `				fingStatus.Or(fingRunningFinalizer)
				reflectcall(nil, unsafe.Pointer(f.fn), frame, uint32(framesz), uint32(framesz), uint32(framesz), &regs)
				fingStatus.And(^fingRunningFinalizer)
				gcprobeFinalizerDone(gcprobeRun)
`,
	},
	{
		file: "mheap.go",
		what: "removefinalizer",
		find: `func removefinalizer(p unsafe.Pointer) {
	s := (*specialfinalizer)(unsafe.Pointer(removespecial(p, _KindSpecialFinalizer)))
	if s == nil {
		return // there wasn't a finalizer to remove
	}
	lock(&mheap_.speciallock)
	mheap_.specialfinalizeralloc.free(unsafe.Pointer(s))
	unlock(&mheap_.speciallock)
}
`,
		advice: `func removefinalizer(p unsafe.Pointer) uintptr {
	s := (*specialfinalizer)(unsafe.Pointer(removespecial(p, _KindSpecialFinalizer)))
	if s == nil {
		return 0 // there wasn't a finalizer to remove
	}
	nret := s.nret // gcprobe: the registration's token, for SetFinalizer's clear
	lock(&mheap_.speciallock)
	mheap_.specialfinalizeralloc.free(unsafe.Pointer(s))
	unlock(&mheap_.speciallock)
	return nret
}
`,
	},
	{
		file: "mheap.go",
		what: "the specialCleanup record",
		find: `	cleanup cleanupFn
	// Globally unique ID for the cleanup, obtained from mheap_.cleanupID.
	id uint64
}
`,
		advice: `	cleanup cleanupFn
	// Globally unique ID for the cleanup, obtained from mheap_.cleanupID.
	id uint64
	// gcprobeTok is the registration's token in gcprobe's ledger, or 0.
	gcprobeTok uint64
}
`,
	},
	{
		file: "mheap.go",
		what: "addCleanup",
		find: `func addCleanup(p unsafe.Pointer, c cleanupFn) uint64 {
`,
		advice: `func addCleanup(p unsafe.Pointer, c cleanupFn, gcprobeTok uint64) uint64 {
`,
	},
	{
		file: "mheap.go",
		what: "addCleanup's record fill",
		find: `	s.special.kind = _KindSpecialCleanup
	s.cleanup = c
	s.id = id
`,
		advice: `	s.special.kind = _KindSpecialCleanup
	s.cleanup = c
	s.id = id
	s.gcprobeTok = gcprobeTok
`,
	},
	{
		file: "mcleanup.go",
		what: "AddCleanup's box for the argument",
		find: `	// Create new storage for the argument.
	var argv *S
	if size := unsafe.Sizeof(arg); size < maxTinySize && argType.PtrBytes == 0 {
`,
		// With a probe attached, the argument goes in a box with room for
		// the token (gcprobeCleanupBox), allocated instead of the
		// runtime's, not beside it: a counted AddCleanup allocates as
		// often as a stock one, and as much for an argument of up to 8
		// bytes (8 bytes more for a larger one). The token itself is taken after the runtime's
		// checks of the arguments (the next join point), so that a call
		// that panics is not counted.
		advice: `	// Create new storage for the argument.
	var argv *S
	var gcprobeBox *gcprobeCleanupBox[S]
	if gcprobeLoad() != nil {
		gcprobeBox = gcprobeNewCleanupBox[S]()
		argv = &gcprobeBox.arg
	} else if size := unsafe.Sizeof(arg); size < maxTinySize && argType.PtrBytes == 0 {
`,
	},
	{
		file: "mcleanup.go",
		what: "AddCleanup's call of addCleanup",
		find: `	id := addCleanup(unsafe.Pointer(ptr), cleanupFn{
		// Instantiate a caller function to call the cleanup, that is cleanup(*argv).
		//
		// TODO(mknyszek): This allocates because the generic dictionary argument
		// gets closed over, but callCleanup doesn't even use the dictionary argument,
		// so theoretically that could be removed, eliminating an allocation.
		call: callCleanup[S],
		fn:   *(**funcval)(unsafe.Pointer(&cleanup)),
		arg:  unsafe.Pointer(argv),
	})
`,
		advice: `	gcprobeTok := uint64(0)
	if gcprobeBox != nil {
		gcprobeTok = gcprobeCleanupAdded(abi.TypeFor[T](), sys.GetCallerPC())
	}
	gcprobeFn := cleanupFn{fn: *(**funcval)(unsafe.Pointer(&cleanup)), arg: unsafe.Pointer(argv)}
	// One caller instantiated, as AddCleanup does: each allocates.
	if gcprobeTok != 0 {
		gcprobeBox.tok = gcprobeTok
		gcprobeFn.call = gcprobeCallCleanup[S]
	} else {
		gcprobeFn.call = callCleanup[S]
	}
	id := addCleanup(unsafe.Pointer(ptr), gcprobeFn, gcprobeTok)
`,
	},
	{
		file: "mcleanup.go",
		what: "Cleanup.Stop's release of the record it removed",
		find: `	if found == nil {
		return
	}
	lock(&mheap_.speciallock)
	mheap_.specialCleanupAlloc.free(unsafe.Pointer(found))
	unlock(&mheap_.speciallock)
`,
		advice: `	if found == nil {
		return
	}
	gcprobeTok := (*specialCleanup)(unsafe.Pointer(found)).gcprobeTok
	lock(&mheap_.speciallock)
	mheap_.specialCleanupAlloc.free(unsafe.Pointer(found))
	unlock(&mheap_.speciallock)
	gcprobeCleanupStopped(gcprobeTok)
`,
	},
	{
		file: "runtime2.go",
		what: "the end of the goroutine record (type g)",
		find: `	// valgrindStackID is used to track what memory is used for stacks when a program is
	// built with the "valgrind" build tag, otherwise it is unused.
	valgrindStackID uintptr
}
`,
		advice: `	// valgrindStackID is used to track what memory is used for stacks when a program is
	// built with the "valgrind" build tag, otherwise it is unused.
	valgrindStackID uintptr

	// gcprobeOrigin is, in gcprobe's runtime build mode, the return PC
	// of the frame that caused this goroutine (gcprobeGoOrigin), or 0.
	gcprobeOrigin uintptr
}
`,
	},
	{
		file: "runtime2.go",
		what: "the end of the P record (type p)",
		find: `	// Padding is no longer needed. False sharing is now not a worry because p is large enough
	// that its size class is an integer multiple of the cache line size (for any of our architectures).
}
`,
		advice: `	// gcprobeCounts is, in gcprobe's runtime build mode, the P's table
	// of counts not yet in the ledger (gcprobeCountOnP).
	gcprobeCounts gcprobePCounts

	// Padding is no longer needed. False sharing is now not a worry because p is large enough
	// that its size class is an integer multiple of the cache line size (for any of our architectures).
}
`,
	},
	{
		file: "proc.go",
		what: "procresize keeping retired Ps in allp's array (checked, not changed: gcprobeFlushCounts reads their tables)",
		find: `			// Copy everything up to allp's cap so we
			// never lose old allocated Ps.
			copy(nallp, allp[:cap(allp)])
`,
		advice: `			// Copy everything up to allp's cap so we
			// never lose old allocated Ps.
			copy(nallp, allp[:cap(allp)])
`,
	},
	{
		file: "proc.go",
		what: "newproc (the go statement, before its switch to the system stack)",
		find: `	gp := getg()
	pc := sys.GetCallerPC()
	systemstack(func() {
		newg := newproc1(fn, gp, pc, false, waitReasonZero)
`,
		// The origin is found on the creating goroutine, whose stack the
		// hook walks, before the switch; it is stored before the new
		// goroutine is queued, so that nothing can read it unset.
		advice: `	gp := getg()
	pc := sys.GetCallerPC()
	gcprobeOrigin := gcprobeGoOrigin(gp, pc)
	systemstack(func() {
		newg := newproc1(fn, gp, pc, false, waitReasonZero)
		newg.gcprobeOrigin = gcprobeOrigin
`,
	},
	{
		file: "proc.go",
		what: "newproc1's record of the go statement (newg.gopc)",
		// A goroutine record is reused (gfget): every creation sets the
		// field, newproc's and the others' (coroutines, synctest, debug
		// calls), which have none.
		find: `	newg.gopc = callerpc
`,
		advice: `	newg.gopc = callerpc
	newg.gcprobeOrigin = 0
`,
	},

	// The heap profile's stacks: a sampled allocation's stack ends with
	// the origin of the goroutine that made it (gcprobeHeapOrigin), so
	// that an allocation on a goroutine only the standard library runs
	// is named at the program's line that caused that goroutine.
	{
		file: "mprof.go",
		what: "mProf_Malloc's stack of a sampled allocation (callers into mp.profStack)",
		find: `	nstk := callers(3, mp.profStack[:debug.profstackdepth+2])
	index := (mProfCycle.read() + 2) % uint32(len(memRecord{}.future))
`,
		advice: `	nstk := callers(3, mp.profStack[:debug.profstackdepth+2])
	nstk = gcprobeHeapOrigin(mp.profStack[:debug.profstackdepth+2], nstk)
	index := (mProfCycle.read() + 2) % uint32(len(memRecord{}.future))
`,
	},

	// Forced GC cycles: runtime.GC reports its caller before the cycle's
	// work starts. Every forced cycle (gcTriggerCycle, which
	// /gc/cycles/forced:gc-cycles counts) is started by GC: mgc.go's GC
	// is the one place that makes that trigger. debug.FreeOSMemory
	// reaches it through runtime/debug.freeOSMemory, which mheap.go
	// defines (runtime_debug_freeOSMemory: GC, then scavengeAll), and
	// runtime/pprof's goroutine leak profile through goroutineLeakGC: the
	// hook sees their runtime frame as GC's caller, and finalizerwatch
	// walks up to the program's line. The two FreeOSMemory join points
	// change nothing: were FreeOSMemory to force its cycle another way,
	// its calls would go uncounted, so the patch refuses instead.
	{
		file: "mgc.go",
		what: "mgc.go's imports (internal/runtime/sys added, for GC's caller PC)",
		find: `	"internal/runtime/gc"
	"unsafe"
)
`,
		advice: `	"internal/runtime/gc"
	"internal/runtime/sys"
	"unsafe"
)
`,
	},
	{
		file: "mgc.go",
		what: "runtime.GC (its wait for the current cycle's mark, before it triggers its own)",
		find: `	// Wait until the current sweep termination, mark, and mark
	// termination complete.
	n := work.cycles.Load()
	gcWaitOnMark(n)
`,
		advice: `	// gcprobe: the caller, reported on its goroutine before any of the
	// cycle's work; without a probe, a pointer load and a nil check.
	gcprobeForcedGC(sys.GetCallerPC())

	// Wait until the current sweep termination, mark, and mark
	// termination complete.
	n := work.cycles.Load()
	gcWaitOnMark(n)
`,
	},
	{
		file: "mheap.go",
		what: "runtime/debug.freeOSMemory (runtime_debug_freeOSMemory calling GC; checked, not changed)",
		find: `//go:linkname runtime_debug_freeOSMemory runtime/debug.freeOSMemory
func runtime_debug_freeOSMemory() {
	GC()
`,
		advice: `//go:linkname runtime_debug_freeOSMemory runtime/debug.freeOSMemory
func runtime_debug_freeOSMemory() {
	GC()
`,
	},
	{
		file: "debug/garbage.go",
		what: "debug.FreeOSMemory (calling freeOSMemory; checked, not changed)",
		find: `func FreeOSMemory() {
	freeOSMemory()
}
`,
		advice: `func FreeOSMemory() {
	freeOSMemory()
}
`,
	},
}
