package finalizerwatch

import (
	"cmp"
	"strings"
	"testing"
	"unsafe"

	"github.com/gcprobe/probe/stackcapture"
)

func panicMessage(f func()) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			msg, _ = r.(string)
			if msg == "" {
				msg = "non-string panic"
			}
		}
	}()
	f()
	return ""
}

type otherThing struct{ p *int }

func TestSetFinalizerBadArguments(t *testing.T) {
	w := newWatcher(t)
	tests := []struct {
		name      string
		obj, fin  any
		wantPanic string
	}{
		{"nil object", nil, func(*thing) {}, "finalizerwatch.SetFinalizer: first argument is nil"},
		{"nil pointer", (*thing)(nil), func(*thing) {}, "finalizerwatch.SetFinalizer: first argument is a nil *finalizerwatch.thing"},
		{"nil pointer, clearing", (*thing)(nil), nil, "finalizerwatch.SetFinalizer: first argument is a nil *finalizerwatch.thing"},
		{"not a pointer", thing{}, func(thing) {}, "finalizerwatch.SetFinalizer: first argument is finalizerwatch.thing, not pointer"},
		{"not a function", &thing{}, 42, "finalizerwatch.SetFinalizer: second argument is int, not a function"},
		{"no parameter", &thing{}, func() {}, "finalizerwatch.SetFinalizer: cannot pass *finalizerwatch.thing to finalizer func()"},
		{"two parameters", &thing{}, func(*thing, int) {}, "finalizerwatch.SetFinalizer: cannot pass *finalizerwatch.thing to finalizer func(*finalizerwatch.thing, int)"},
		{"variadic", &thing{}, func(...*thing) {}, "finalizerwatch.SetFinalizer: cannot pass *finalizerwatch.thing to finalizer func(...*finalizerwatch.thing) because dotdotdot"},
		{"wrong type", &thing{}, func(*otherThing) {}, "finalizerwatch.SetFinalizer: cannot pass *finalizerwatch.thing to finalizer func(*finalizerwatch.otherThing)"},
		{"interface not implemented", &otherThing{}, func(closer) {}, "finalizerwatch.SetFinalizer: cannot pass *finalizerwatch.otherThing to finalizer func(finalizerwatch.closer)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := panicMessage(func() { w.SetFinalizer(tt.obj, tt.fin) }); got != tt.wantPanic {
				t.Fatalf("panic %q, want %q", got, tt.wantPanic)
			}
		})
	}
	// A refused registration leaves the ledger as it was.
	tot := w.totals(KindFinalizer)
	if tot.Registered != 0 || tot.Outstanding != 0 {
		t.Fatalf("after refused registrations: %+v", tot)
	}
}

// TestSetFinalizerTypeCache checks that the cache of checked type pairs
// (typeCache) accepts only the pair it checked: after a good registration,
// the same object type with a bad finalizer type, and a bad object type
// with the same finalizer type, still panic, however many pairs were seen
// in between (slots are shared by pairs that hash alike).
func TestSetFinalizerTypeCache(t *testing.T) {
	w := newWatcher(t)
	good := func(*thing) {}
	for round := range 3 {
		o := &thing{}
		w.SetFinalizer(o, good)
		w.SetFinalizer(o, nil)
		if got, want := panicMessage(func() { w.SetFinalizer(&thing{}, func(*otherThing) {}) }), "finalizerwatch.SetFinalizer: cannot pass *finalizerwatch.thing to finalizer func(*finalizerwatch.otherThing)"; got != want {
			t.Fatalf("round %d: panic %q, want %q", round, got, want)
		}
		if got, want := panicMessage(func() { w.SetFinalizer(&otherThing{}, good) }), "finalizerwatch.SetFinalizer: cannot pass *finalizerwatch.otherThing to finalizer func(*finalizerwatch.thing)"; got != want {
			t.Fatalf("round %d: panic %q, want %q", round, got, want)
		}
		if got, want := panicMessage(func() { w.SetFinalizer((*thing)(nil), good) }), "finalizerwatch.SetFinalizer: first argument is a nil *finalizerwatch.thing"; got != want {
			t.Fatalf("round %d: panic %q, want %q", round, got, want)
		}
	}
	if tot := w.totals(KindFinalizer); tot.Registered != 3 || tot.Cleared != 3 {
		t.Fatalf("totals %+v, want 3 registered and cleared", tot)
	}
}

func TestAddCleanupBadArguments(t *testing.T) {
	w := newWatcher(t)
	o := &thing{}
	tests := []struct {
		name      string
		add       func()
		wantPanic string
	}{
		{"nil ptr", func() { AddCleanupTo(w, (*thing)(nil), func(int) {}, 0) }, "finalizerwatch.AddCleanup: ptr is nil"},
		{"nil cleanup", func() { AddCleanupTo(w, o, (func(int))(nil), 0) }, "finalizerwatch.AddCleanup: cleanup is nil"},
		{"arg is ptr", func() { AddCleanupTo(w, o, func(*thing) {}, o) }, "finalizerwatch.AddCleanup: ptr is equal to arg, cleanup will never run"},
		{"arg is ptr as unsafe.Pointer", func() { AddCleanupTo(w, o, func(unsafe.Pointer) {}, unsafe.Pointer(o)) }, "finalizerwatch.AddCleanup: ptr is equal to arg, cleanup will never run"},
		{"nil watcher", func() { AddCleanupTo(nil, o, func(int) {}, 0) }, "finalizerwatch.AddCleanupTo: nil Watcher"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := panicMessage(tt.add)
			if got == "" || !strings.HasPrefix(got, tt.wantPanic) {
				t.Fatalf("panic %q, want prefix %q", got, tt.wantPanic)
			}
		})
	}
	if tot := w.totals(KindCleanup); tot.Registered != 0 || tot.Outstanding != 0 {
		t.Fatalf("refused registrations were counted: %+v", tot)
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	tests := []struct {
		name string
		give Option
		want string
	}{
		{"max sites", WithMaxSites(0), "finalizerwatch: WithMaxSites: must be in [1, 2097152], got 0"},
		{"max sites huge", WithMaxSites(1 << 40), "finalizerwatch: WithMaxSites: must be in [1, 2097152], got 1099511627776"},
		{"max sites overflowing", WithMaxSites(1 << 61), "finalizerwatch: WithMaxSites: must be in [1, 2097152], got 2305843009213693952"},
		{"max stacks", WithMaxStacks(-3), "finalizerwatch: WithMaxStacks: must be in [1, 2097152], got -3"},
		{"max stacks huge", WithMaxStacks(1 << 40), "finalizerwatch: WithMaxStacks: must be in [1, 2097152], got 1099511627776"},
		{"suspect cycles low", WithSuspectCycles(0), "finalizerwatch: WithSuspectCycles: must be in [1, 15], got 0"},
		{"suspect cycles high", WithSuspectCycles(16), "finalizerwatch: WithSuspectCycles: must be in [1, 15], got 16"},
		{"nil option", nil, "finalizerwatch: New: nil Option"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, err := New(tt.give)
			if err == nil || err.Error() != tt.want || w != nil {
				t.Fatalf("New: %v, %v; want error %q", w, err, tt.want)
			}
		})
	}
	// The largest accepted sizes work: the tables are made, and used.
	w := newWatcher(t, WithMaxSites(MaxSitesLimit), WithMaxStacks(MaxStacksLimit))
	o := &thing{}
	w.SetFinalizer(o, func(*thing) {})
	w.SetFinalizer(o, nil)
	if tot := w.totals(KindFinalizer); tot.Registered != 1 || tot.Cleared != 1 {
		t.Fatalf("at the largest table sizes: %+v", tot)
	}
	if got := panicMessage(func() { newWatcher(t).top(-1) }); got != "finalizerwatch.Top: negative n" {
		t.Fatalf("Top(-1) panicked with %q", got)
	}
}

// Zero-size objects share one address and the runtime ignores their
// finalizers; the ledger must not count them as outstanding forever.
func TestZeroSizeObjectsAreNotCounted(t *testing.T) {
	w := newWatcher(t)
	type empty struct{}
	w.SetFinalizer(&empty{}, func(*empty) {})
	AddCleanupTo(w, &empty{}, func(int) {}, 1)
	for _, k := range Kinds {
		if tot := w.totals(k); tot.Registered != 0 {
			t.Errorf("%v: %+v", k, tot)
		}
	}
}

var global thing

// The runtime ignores cleanups on globals; AddCleanup can tell, and does
// not count them.
func TestCleanupOnGlobalIsNotCounted(t *testing.T) {
	w := newWatcher(t)
	c := AddCleanupTo(w, &global, func(int) {}, 1)
	c.Stop()
	if tot := w.totals(KindCleanup); tot.Registered != 0 || tot.Outstanding != 0 {
		t.Fatalf("cleanup on a global counted: %+v", tot)
	}
}

func TestCompareRank(t *testing.T) {
	site := func(class Class, growth, suspect uint64, fn string, line int) SiteStats {
		return SiteStats{Class: class, Growth: growth, Suspect: suspect, Site: stackcapture.Frame{Function: fn, File: "/x.go", Line: line}}
	}
	ordered := []SiteStats{
		site(ClassGrowing, 9, 1, "a.f", 1),
		site(ClassGrowing, 3, 5, "a.f", 1),
		site(ClassGrowing, 3, 4, "a.f", 1),
		site(ClassStable, 1000, 8000, "a.f", 1), // growth ranks growing sites only
		site(ClassStable, 0, 9, "a.f", 1),
		site(ClassStable, 9, 5, "a.f", 1),
		site(ClassChurn, 0, 0, "a.f", 9),
		site(ClassChurn, 0, 0, "a.f", 10), // lines compare as numbers
		site(ClassChurn, 0, 0, "b.g", 1),
	}
	for i := range ordered {
		for j := range ordered {
			got := compareRank(&ordered[i], &ordered[j])
			if want := cmp.Compare(i, j); (got < 0) != (want < 0) || (got == 0) != (want == 0) {
				t.Errorf("compareRank(%d, %d) = %d, want the sign of %d", i, j, got, want)
			}
		}
	}
}
