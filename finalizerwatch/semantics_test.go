package finalizerwatch

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/gcprobe/probe/internal/queues"
	"github.com/gcprobe/probe/internal/testkit"
)

// The side-by-side semantics test: every scenario runs once with the
// runtime's functions and once with finalizerwatch's, and what ran, how
// often, and what panicked must be the same. Where the runtime ends the
// program (a fatal error, not a panic), the runtime's side runs in a child
// process and must die with that error, and finalizerwatch's must panic,
// recoverably, with the same complaint.

// via is one side: the runtime's functions (w nil) or a Watcher's.
type via struct{ w *Watcher }

func (v via) raw() bool { return v.w == nil }

func (v via) setFinalizer(obj, fin any) {
	if v.raw() {
		runtime.SetFinalizer(obj, fin)
		return
	}
	v.w.SetFinalizer(obj, fin)
}

type stopper interface{ Stop() }

func addCleanupVia[T, S any](v via, ptr *T, f func(S), arg S) stopper {
	if v.raw() {
		return runtime.AddCleanup(ptr, f, arg)
	}
	return AddCleanupTo(v.w, ptr, f, arg)
}

// outcome is what a scenario did.
type outcome struct {
	mu     sync.Mutex
	ran    map[string]int
	panics []string // "step: message", the function's name cut off
}

func newOutcome() *outcome { return &outcome{ran: map[string]int{}} }

func (o *outcome) hit(name string) {
	o.mu.Lock()
	o.ran[name]++
	o.mu.Unlock()
}

func (o *outcome) count(name string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.ran[name]
}

// try runs f and records its panic, if any, without the name of the
// function that panicked ("runtime.AddCleanup: " or
// "finalizerwatch.AddCleanup: "), so that the two sides compare.
func (o *outcome) try(step string, f func()) {
	defer func() {
		if p := recover(); p != nil {
			msg := fmt.Sprint(p)
			for _, prefix := range []string{"runtime.SetFinalizer: ", "runtime.AddCleanup: ", "finalizerwatch.SetFinalizer: ", "finalizerwatch.AddCleanup: "} {
				msg = strings.TrimPrefix(msg, prefix)
			}
			o.mu.Lock()
			o.panics = append(o.panics, step+": "+msg)
			o.mu.Unlock()
		}
	}()
	f()
}

func (o *outcome) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	keys := make([]string, 0, len(o.ran))
	for k := range o.ran {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s ran %d; ", k, o.ran[k])
	}
	fmt.Fprintf(&b, "panics %q", o.panics)
	return b.String()
}

// drain runs GC cycles until every finalizer and cleanup queued by each
// has finished: enough for an object that a finalizer resurrected, and
// then dropped, to be collected and its later callbacks to run. Then it
// waits until every Stop made before has been settled (see settleStops).
func drain(t testing.TB) {
	t.Helper()
	r := queues.NewReader()
	for range 4 {
		runtime.GC()
		mark := r.Read()
		testkit.Poll(t, 20*time.Second, "the finalizer and cleanup queues to drain", func() bool { return r.Read().DrainedSince(mark) })
	}
	testkit.Poll(t, 20*time.Second, "the Stops settled", func() bool { return settleStops(false) == 0 })
}

// Types the scenarios use. big is never tiny-allocated; tiny is.
type (
	big struct {
		p   *big
		buf [40]byte
	}
	tiny struct{ n int32 }
	// withEnd has a zero-size last field, whose address lies inside the
	// struct's allocation (the compiler pads the struct for it).
	withEnd struct {
		n   int64
		end struct{}
	}
	empty struct{}
)

// resurrected holds objects that finalizers brought back to life. The
// finalizer goroutine writes it; the mutex tells the race detector what
// drain's queue counters already guarantee.
var (
	resurrectedMu sync.Mutex
	resurrected   []*big
)

func resurrect(b *big) {
	resurrectedMu.Lock()
	resurrected = append(resurrected, b)
	resurrectedMu.Unlock()
}

func dropResurrected() {
	resurrectedMu.Lock()
	resurrected = nil
	resurrectedMu.Unlock()
}

// semanticsScenario is one row. fatal, if set, is what the runtime's side
// dies with ("fatal error: ..."); finalizerwatch's side must then record
// the panic wantPanic instead, or, with watchedFatal, die with the same
// fatal error, the runtime's own answer, in a child process too.
type semanticsScenario struct {
	name         string
	run          func(t testing.TB, v via, o *outcome)
	fatal        string
	wantPanic    string
	watchedFatal bool
}

var semanticsScenarios = []semanticsScenario{
	{name: "finalizer runs once", run: func(t testing.TB, v via, o *outcome) {
		v.setFinalizer(&big{}, func(*big) { o.hit("f") })
		drain(t)
	}},
	{name: "cleanup runs once", run: func(t testing.TB, v via, o *outcome) {
		addCleanupVia(v, &big{}, func(int) { o.hit("c") }, 0)
		drain(t)
	}},
	{name: "resurrection", run: func(t testing.TB, v via, o *outcome) {
		v.setFinalizer(&big{}, func(b *big) { o.hit("f"); resurrect(b) })
		drain(t)
		dropResurrected() // dropped again: no finalizer runs twice
		drain(t)
	}},
	{name: "resurrection with a cleanup beside the finalizer", run: func(t testing.TB, v via, o *outcome) {
		b := &big{}
		v.setFinalizer(b, func(b *big) { o.hit("f"); resurrect(b) })
		addCleanupVia(v, b, func(int) { o.hit("c") }, 0)
		b = nil
		drain(t)
		if o.count("c") != 0 {
			o.hit("cleanup ran while the finalizer's object lived")
		}
		dropResurrected()
		drain(t)
	}},
	{name: "re-arming inside the finalizer", run: func(t testing.TB, v via, o *outcome) {
		var f func(*big)
		f = func(b *big) {
			o.hit("f")
			if o.count("f") < 3 {
				v.setFinalizer(b, f)
			}
		}
		v.setFinalizer(&big{}, f)
		drain(t)
		drain(t)
	}},
	{name: "clear then set", run: func(t testing.TB, v via, o *outcome) {
		b := &big{}
		v.setFinalizer(b, func(*big) { o.hit("first") })
		v.setFinalizer(b, nil)
		v.setFinalizer(b, func(*big) { o.hit("second") })
		b = nil
		drain(t)
	}},
	{name: "clear twice, clear never set", run: func(t testing.TB, v via, o *outcome) {
		b := &big{}
		v.setFinalizer(b, func(*big) { o.hit("f") })
		v.setFinalizer(b, nil)
		v.setFinalizer(b, nil)
		v.setFinalizer(&big{}, nil)
		b = nil
		drain(t)
	}},
	{name: "raw clear of a registration, then set again on the live object", run: func(t testing.TB, v via, o *outcome) {
		b := &big{}
		v.setFinalizer(b, func(*big) { o.hit("first") })
		runtime.SetFinalizer(b, nil)
		o.try("set again", func() { v.setFinalizer(b, func(*big) { o.hit("second") }) })
		b = nil
		drain(t)
	}},
	{name: "raw clear of a registration, object dropped", run: func(t testing.TB, v via, o *outcome) {
		b := &big{}
		v.setFinalizer(b, func(*big) { o.hit("f") })
		runtime.SetFinalizer(b, nil)
		b = nil
		drain(t)
	}},
	{name: "clear of a raw registration", run: func(t testing.TB, v via, o *outcome) {
		b := &big{}
		runtime.SetFinalizer(b, func(*big) { o.hit("f") })
		v.setFinalizer(b, nil)
		b = nil
		drain(t)
	}},
	{name: "address reuse after raw clears", run: func(t testing.TB, v via, o *outcome) {
		// Objects whose finalizers were cleared directly are freed; their
		// addresses are reused by new objects that get finalizers.
		for range 20 {
			for range 200 {
				b := &big{}
				v.setFinalizer(b, func(*big) { o.hit("cleared directly") })
				runtime.SetFinalizer(b, nil)
			}
			runtime.GC()
			for range 200 {
				o.try("set", func() { v.setFinalizer(&big{}, func(*big) { o.hit("f") }) })
			}
		}
		drain(t)
	}},
	{name: "Stop twice", run: func(t testing.TB, v via, o *outcome) {
		b := &big{}
		c := addCleanupVia(v, b, func(int) { o.hit("c") }, 0)
		c.Stop()
		c.Stop()
		runtime.KeepAlive(b)
		b = nil
		drain(t)
	}},
	{name: "Stop after run", run: func(t testing.TB, v via, o *outcome) {
		c := addCleanupVia(v, &big{}, func(int) { o.hit("c") }, 0)
		drain(t)
		c.Stop()
		drain(t)
	}},
	{name: "Stop racing a queued cleanup", run: func(t testing.TB, v via, o *outcome) {
		// a and b become unreachable in the same cycle; b's cleanup stops
		// a's, which the runtime has queued (or already run) by then: a's
		// cleanup runs all the same.
		for i := range 200 {
			// Half the pairs have b below a in memory, half above: the
			// runtime queues them in address order, so some of b's
			// cleanups run first.
			var a, b *big
			if i%2 == 0 {
				b, a = &big{}, &big{}
			} else {
				a, b = &big{}, &big{}
			}
			ca := addCleanupVia(v, a, func(int) { o.hit("a") }, 0)
			addCleanupVia(v, b, func(c stopper) { c.Stop(); o.hit("b") }, ca)
		}
		drain(t)
	}},
	{name: "zero-size objects", run: func(t testing.TB, v via, o *outcome) {
		o.try("finalizer", func() { v.setFinalizer(&empty{}, func(*empty) { o.hit("f") }) })
		o.try("finalizer again", func() { v.setFinalizer(&empty{}, func(*empty) { o.hit("f") }) })
		o.try("cleanup", func() { addCleanupVia(v, &empty{}, func(int) { o.hit("c") }, 0) })
		o.try("clear", func() { v.setFinalizer(&empty{}, nil) })
		drain(t)
	}},
	{name: "zero-size field", run: func(t testing.TB, v via, o *outcome) {
		s := &withEnd{}
		addCleanupVia(v, &s.end, func(int) { o.hit("c") }, 0)
		stopped := &withEnd{}
		addCleanupVia(v, &stopped.end, func(int) { o.hit("stopped") }, 0).Stop()
		runtime.KeepAlive(stopped)
		s = nil
		drain(t)
	}},
	{name: "tiny objects sharing a block", run: func(t testing.TB, v via, o *outcome) {
		objs := make([]*tiny, 8)
		cs := make([]stopper, len(objs))
		for i := range objs {
			objs[i] = &tiny{n: int32(i)}
			// arg points to another tiny object, likely in the same block:
			// the runtime allows it there.
			o.try("add", func() { cs[i] = addCleanupVia(v, objs[i], func(*tiny) { o.hit("c") }, objs[(i+1)%len(objs)]) })
		}
		for _, c := range cs {
			if c != nil {
				c.Stop()
			}
		}
		runtime.KeepAlive(objs)
		drain(t)
	}},
	{name: "reference cycle", run: func(t testing.TB, v via, o *outcome) {
		// Finalizers on a cycle never run; cleanups do.
		a, b := &big{}, &big{}
		a.p, b.p = b, a
		v.setFinalizer(a, func(*big) { o.hit("fa") })
		v.setFinalizer(b, func(*big) { o.hit("fb") })
		c, d := &big{}, &big{}
		c.p, d.p = d, c
		addCleanupVia(v, c, func(int) { o.hit("cc") }, 0)
		addCleanupVia(v, d, func(int) { o.hit("cd") }, 0)
		a, b, c, d = nil, nil, nil, nil
		drain(t)
	}},
	{name: "cleanup arg is ptr", run: func(t testing.TB, v via, o *outcome) {
		b := &big{}
		o.try("add", func() { addCleanupVia(v, b, func(*big) { o.hit("c") }, b) })
	}},
	{name: "cleanup arg inside ptr", run: func(t testing.TB, v via, o *outcome) {
		b := &big{}
		o.try("add", func() { addCleanupVia(v, b, func(*[40]byte) { o.hit("c") }, &b.buf) })
	}},
	{name: "cleanup arg inside ptr's allocation, not inside *ptr", run: func(t testing.TB, v via, o *outcome) {
		b := &big{}
		o.try("add", func() {
			addCleanupVia(v, (*[8]byte)(unsafe.Pointer(&b.buf)), func(*[8]byte) { o.hit("c") }, (*[8]byte)(unsafe.Pointer(&b.buf[16])))
		})
	}},
	{name: "cleanup closes over ptr", run: func(t testing.TB, v via, o *outcome) {
		b := &big{}
		o.try("add", func() { addCleanupVia(v, b, func(int) { o.hit("c"); _ = b.buf }, 0) })
	}},
	{name: "cleanup closes over ptr, the site's first registration on a global", run: func(t testing.TB, v via, o *outcome) {
		// One call site: its first registration is on a global, where the
		// runtime checks nothing; its second, on the heap, closes over ptr
		// (issue 26, item 11).
		for i, p := range []*big{&globalBig, {}} {
			o.try(fmt.Sprint("add ", i), func() { addCleanupVia(v, p, func(int) { o.hit("c"); _ = p.buf }, 0) })
		}
	}},
	{name: "cleanup ptr nil", run: func(t testing.TB, v via, o *outcome) {
		o.try("add", func() { addCleanupVia(v, (*big)(nil), func(int) { o.hit("c") }, 0) })
	}},
	{name: "cleanup on a global", run: func(t testing.TB, v via, o *outcome) {
		o.try("add", func() { addCleanupVia(v, &globalBig, func(int) { o.hit("c") }, 0).Stop() })
	}},
	{name: "finalizer: first argument nil", fatal: "runtime.SetFinalizer: first argument is nil", wantPanic: "first argument is nil",
		run: func(t testing.TB, v via, o *outcome) { o.try("set", func() { v.setFinalizer(nil, func(*big) {}) }) }},
	{name: "finalizer: nil pointer", fatal: "runtime.SetFinalizer: pointer not in allocated block", wantPanic: "first argument is a nil *finalizerwatch.big",
		run: func(t testing.TB, v via, o *outcome) {
			o.try("set", func() { v.setFinalizer((*big)(nil), func(*big) {}) })
		}},
	{name: "finalizer: not a pointer", fatal: "runtime.SetFinalizer: first argument is finalizerwatch.big, not pointer", wantPanic: "first argument is finalizerwatch.big, not pointer",
		run: func(t testing.TB, v via, o *outcome) { o.try("set", func() { v.setFinalizer(big{}, func(big) {}) }) }},
	{name: "finalizer: not a function", fatal: "runtime.SetFinalizer: second argument is int, not a function", wantPanic: "second argument is int, not a function",
		run: func(t testing.TB, v via, o *outcome) { o.try("set", func() { v.setFinalizer(&big{}, 1) }) }},
	{name: "finalizer: wrong type", fatal: "runtime.SetFinalizer: cannot pass *finalizerwatch.big to finalizer func(*finalizerwatch.tiny)", wantPanic: "cannot pass *finalizerwatch.big to finalizer func(*finalizerwatch.tiny)",
		run: func(t testing.TB, v via, o *outcome) { o.try("set", func() { v.setFinalizer(&big{}, func(*tiny) {}) }) }},
	{name: "finalizer: variadic", fatal: "runtime.SetFinalizer: cannot pass *finalizerwatch.big to finalizer func(...*finalizerwatch.big) because dotdotdot", wantPanic: "cannot pass *finalizerwatch.big to finalizer func(...*finalizerwatch.big) because dotdotdot",
		run: func(t testing.TB, v via, o *outcome) {
			o.try("set", func() { v.setFinalizer(&big{}, func(...*big) {}) })
		}},
	{name: "finalizer: named pointer parameter, object type with methods", fatal: "runtime.SetFinalizer: cannot pass *finalizerwatch.withMethod to finalizer func(finalizerwatch.namedPtr)",
		wantPanic: "cannot pass *finalizerwatch.withMethod to finalizer func(finalizerwatch.namedPtr)",
		run: func(t testing.TB, v via, o *outcome) {
			o.try("set", func() { v.setFinalizer(&withMethod{}, func(namedPtr) {}) })
		}},
	{name: "finalizer set twice on a live object", fatal: "runtime.SetFinalizer: finalizer already set", watchedFatal: true,
		run: func(t testing.TB, v via, o *outcome) {
			b := &big{}
			v.setFinalizer(b, func(*big) { o.hit("first") })
			o.try("set again", func() { v.setFinalizer(b, func(*big) { o.hit("second") }) })
			b = nil
			drain(t)
		}},
	{name: "set, raw clear, raw set, set", fatal: "runtime.SetFinalizer: finalizer already set", watchedFatal: true,
		run: func(t testing.TB, v via, o *outcome) {
			// The watcher's table still has the first registration; the
			// runtime has the user's raw finalizer, which must not be
			// discarded (issue 26, item 6).
			b := &big{}
			v.setFinalizer(b, func(*big) { o.hit("first") })
			runtime.SetFinalizer(b, nil)
			runtime.SetFinalizer(b, func(*big) { o.hit("raw") })
			o.try("set again", func() { v.setFinalizer(b, func(*big) { o.hit("second") }) })
			b = nil
			drain(t)
		}},
	{name: "raw set, then set", fatal: "runtime.SetFinalizer: finalizer already set", watchedFatal: true,
		run: func(t testing.TB, v via, o *outcome) {
			b := &big{}
			runtime.SetFinalizer(b, func(*big) { o.hit("raw") })
			o.try("set", func() { v.setFinalizer(b, func(*big) { o.hit("second") }) })
			b = nil
			drain(t)
		}},
}

var globalBig big

// withMethod has a method, so its pointer type has the runtime's uncommon
// type data; namedPtr is a named pointer to it, which has too.
type (
	withMethod struct{ n int }
	namedPtr   *withMethod
)

func (*withMethod) method() {}

// semanticsHelperEnv makes the test binary, run again, play one scenario
// with the runtime's functions: the scenarios where the runtime ends the
// program.
const semanticsHelperEnv = "GCPROBE_SEMANTICS_HELPER"

// semanticsWatchedEnv makes the helper play the scenario through a Watcher
// instead: the scenarios where both sides end the program.
const semanticsWatchedEnv = "GCPROBE_SEMANTICS_WATCHED"

func TestSemanticsHelperProcess(t *testing.T) {
	name := os.Getenv(semanticsHelperEnv)
	if name == "" {
		t.Skip("helper process only")
	}
	v := via{}
	if os.Getenv(semanticsWatchedEnv) != "" {
		v.w, _ = New()
	}
	for _, sc := range semanticsScenarios {
		if sc.name == name {
			sc.run(t, v, newOutcome())
			t.Fatal("the scenario did not end the program")
		}
	}
	t.Fatalf("no scenario %q", name)
}

func TestSemanticsSideBySide(t *testing.T) {
	for _, sc := range semanticsScenarios {
		t.Run(sc.name, func(t *testing.T) {
			w := newWatcher(t)
			watched := newOutcome()
			if !sc.watchedFatal {
				sc.run(t, via{w: w}, watched)
			}

			if sc.fatal != "" {
				if testing.Short() {
					t.Skip("runs the test binary")
				}
				sides := []string{"runtime"}
				if sc.watchedFatal {
					sides = append(sides, "finalizerwatch")
				}
				for _, side := range sides {
					env := []string{semanticsHelperEnv + "=" + sc.name}
					if side != "runtime" {
						env = append(env, semanticsWatchedEnv+"=1")
					}
					code, out := testkit.RunTest(t, "TestSemanticsHelperProcess", env)
					if code != 2 || !strings.Contains(out, "fatal error: "+sc.fatal) {
						first, _, _ := strings.Cut(out, "\n\n")
						t.Fatalf("%s: exit %d, want 2 with %q:\n%s", side, code, "fatal error: "+sc.fatal, first)
					}
				}
				if sc.watchedFatal {
					return
				}
				if want := []string{"set: " + sc.wantPanic}; !slices.Equal(watched.panics, want) {
					t.Fatalf("finalizerwatch panicked %q, want %q", watched.panics, want)
				}
			} else {
				raw := newOutcome()
				sc.run(t, via{}, raw)
				if raw.String() != watched.String() {
					t.Fatalf("outcomes differ\nruntime:        %s\nfinalizerwatch: %s", raw, watched)
				}
				t.Logf("both: %s", raw)
			}
			checkLedger(t, w, watched)
		})
	}
}

// checkLedger checks that w's ledger adds up after a scenario: per site,
// registered = executed + cleared + outstanding; and the callbacks counted
// executed are the ones that ran.
func checkLedger(t *testing.T, w *Watcher, o *outcome) {
	t.Helper()
	var executed uint64
	for _, s := range w.entryList() {
		if s.Registered != s.Executed+s.Cleared+s.Outstanding {
			t.Errorf("%v %s: registered %d != executed %d + cleared %d + outstanding %d", s.Kind, s.Site, s.Registered, s.Executed, s.Cleared, s.Outstanding)
		}
		if s.ClearedOutside > s.Cleared {
			t.Errorf("%v %s: cleared outside %d > cleared %d", s.Kind, s.Site, s.ClearedOutside, s.Cleared)
		}
		executed += s.Executed
	}
	ran := 0
	o.mu.Lock()
	for _, n := range o.ran {
		ran += n
	}
	o.mu.Unlock()
	if executed != uint64(ran) {
		t.Errorf("ledger: %d executed, callbacks that ran: %d (%s)", executed, ran, o)
	}
}

// checkFinalizersHelperEnv makes the test binary, run again with
// GODEBUG=checkfinalizers=1, register a finalizer whose closure holds its
// own object, through the runtime ("raw") or a Watcher ("watched").
const checkFinalizersHelperEnv = "GCPROBE_CHECKFINALIZERS_HELPER"

func TestCheckFinalizersHelperProcess(t *testing.T) {
	mode := os.Getenv(checkFinalizersHelperEnv)
	if mode == "" {
		t.Skip("helper process only")
	}
	v := via{}
	if mode == "watched" {
		v.w, _ = New()
	}
	o := newOutcome()
	func() {
		b := &big{} // captured by the closure, never reassigned
		o.try("set", func() { v.setFinalizer(b, func(*big) { _ = b.buf }) })
	}()
	// A well-formed finalizer beside it is accepted in both modes.
	v.setFinalizer(&big{}, func(*big) {})
	runtime.GC()
	runtime.GC()
	fmt.Println("outcome:", o)
}

// With GODEBUG=checkfinalizers=1 the runtime ends the program when an
// object is reachable from its own finalizer. Through finalizerwatch it
// cannot see that, so the watcher makes the check at registration and
// panics, recoverably.
func TestCheckFinalizersCaughtAtRegistration(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the test binary")
	}
	run := func(mode string) (int, string) {
		return testkit.RunTest(t, "TestCheckFinalizersHelperProcess",
			[]string{checkFinalizersHelperEnv + "=" + mode, "GODEBUG=checkfinalizers=1"}, "-test.v")
	}
	if code, out := run("raw"); code == 0 || !strings.Contains(out, "LIKELY CLEANUP/FINALIZER ISSUES") {
		t.Fatalf("runtime: exit %d, want the runtime's report:\n%s", code, out)
	}
	code, out := run("watched")
	want := `outcome: panics ["set: finalizer closes over obj, finalizer will never run (found with GODEBUG=checkfinalizers)"]`
	if code != 0 || !strings.Contains(out, want) {
		t.Fatalf("finalizerwatch: exit %d, want %q:\n%s", code, want, out)
	}
}
