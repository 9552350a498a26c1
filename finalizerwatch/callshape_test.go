package finalizerwatch

import (
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/gcprobe/probe/internal/cgocall"
	"github.com/gcprobe/probe/internal/testkit"
	"github.com/gcprobe/probe/stackcapture"
)

// A registration is counted at the user's line whatever the shape of the
// call: the compiler's method-value wrappers and reflection's call frames
// are skipped like gcprobe's own.

type callShapeObj struct {
	p   *int
	buf [40]byte
}

func callShapeFin(*callShapeObj) {}

func genericRegister[T any](w *Watcher, o *T) {
	w.SetFinalizer(o, func(*T) {}) // marker: shape-generic
}

// inlinedRegister is small enough to be inlined into its callers; its
// line is the site either way.
func inlinedRegister(w *Watcher, o *callShapeObj) {
	w.SetFinalizer(o, callShapeFin) // marker: shape-inlined
}

type registrar interface{ SetFinalizer(obj, fin any) }

// valueRegistrar is not pointer-shaped, so a call through objRegistrar
// goes through the pointer wrapper (*valueRegistrar).register, into which
// register, being small, is inlined.
type valueRegistrar struct {
	w   *Watcher
	pad int
}

func (r valueRegistrar) register(o *callShapeObj) {
	r.w.SetFinalizer(o, callShapeFin) // marker: shape-wrapper-inlined
}

type objRegistrar interface{ register(*callShapeObj) }

//go:noinline
func registerThrough(r objRegistrar, o *callShapeObj) { r.register(o) }

func TestCallShapesCountedAtTheUsersLine(t *testing.T) {
	t.Run("site", func(t *testing.T) { testCallShapes(t, newWatcher(t)) })
	t.Run("full-stacks", func(t *testing.T) { testCallShapes(t, newWatcher(t, WithFullStacks(true))) })
}

func testCallShapes(t *testing.T, w *Watcher) {
	keep := []*callShapeObj{}
	obj := func() *callShapeObj { o := &callShapeObj{}; keep = append(keep, o); return o }
	defer func() {
		for _, o := range keep {
			w.SetFinalizer(o, nil)
		}
	}()

	shapes := map[string]func(){
		"direct": func() {
			w.SetFinalizer(obj(), callShapeFin) // marker: shape-direct
		},
		"method-value": func() {
			reg := w.SetFinalizer
			reg(obj(), callShapeFin) // marker: shape-method-value
		},
		"method-expression": func() {
			(*Watcher).SetFinalizer(w, obj(), callShapeFin) // marker: shape-method-expression
		},
		"interface": func() {
			var r registrar = w
			r.SetFinalizer(obj(), callShapeFin) // marker: shape-interface
		},
		"func-value": func() {
			f := func(o, fin any) { w.SetFinalizer(o, fin) } // marker: shape-func-value
			f(obj(), callShapeFin)
		},
		"wrapper-inlined": func() { registerThrough(valueRegistrar{w: w}, obj()) },
		"generic":         func() { genericRegister(w, obj()) },
		"inlined":         func() { inlinedRegister(w, obj()) },
		"closure":         func() { func() { w.SetFinalizer(obj(), callShapeFin) }() }, // marker: shape-closure
		"deferred":        func() { defer w.SetFinalizer(obj(), callShapeFin) },        // marker: shape-deferred
		"reflect": func() {
			args := []reflect.Value{reflect.ValueOf(obj()), reflect.ValueOf(callShapeFin)}
			reflect.ValueOf(w.SetFinalizer).Call(args) // marker: shape-reflect
		},
		"reflect-method": func() {
			args := []reflect.Value{reflect.ValueOf(obj()), reflect.ValueOf(callShapeFin)}
			reflect.ValueOf(w).MethodByName("SetFinalizer").Call(args) // marker: shape-reflect-method
		},
		"go-statement": func() {
			done := make(chan struct{})
			o := obj()
			go func() { defer close(done); w.SetFinalizer(o, callShapeFin) }() // marker: shape-go-statement
			<-done
		},
	}
	if cgocall.Available {
		// Go called C, which called back into Go: the frame-pointer walk
		// stops at the callback and runtime.Callers crosses it.
		shapes["cgo-callback"] = func() {
			cgocall.Through(func() { w.SetFinalizer(obj(), callShapeFin) }) // marker: shape-cgo-callback
		}
	} else {
		t.Log("built without cgo (no C compiler found, or CGO_ENABLED=0): the cgo-callback shape is not tested")
	}
	for name, register := range shapes {
		t.Run(name, func(t *testing.T) {
			line := testkit.MarkerLine(t, "callshape_test.go", "shape-"+name)
			// Twice: the first call through a PC makes its entry; the
			// second finds it.
			register()
			register()
			var got []string
			for _, s := range w.siteList() {
				if s.Site.Line == line {
					if s.Registered != 2 {
						t.Errorf("site %s: %d registrations, want 2", s.Site, s.Registered)
					}
					if s.Site.File == "" || s.Site.Function == "" {
						t.Errorf("site %+v", s.Site)
					}
					return
				}
				got = append(got, s.Site.String())
			}
			t.Fatalf("no site on line %d; sites: %q", line, got)
		})
	}
	if w.FullStacks() && (runtime.GOARCH == "amd64" || runtime.GOARCH == "arm64") && !stackcapture.FramePointerWalk() {
		// Every new stack was checked against runtime.Callers
		// (stackcapture.CallersChecked): a difference on any of these
		// shapes turned the walk off.
		t.Error("the frame-pointer walk is off: it misread one of these stacks")
	}
	if cgocall.Available && w.FullStacks() {
		// The stack crosses the callback down to the Go that called C.
		line := testkit.MarkerLine(t, "callshape_test.go", "shape-cgo-callback")
		found := false
		for _, s := range w.entryList() {
			if len(s.Stack) == 0 || s.Stack[0].Line != line {
				continue
			}
			found = true
			var fns []string
			for _, f := range s.Stack {
				fns = append(fns, f.Function)
			}
			if !slices.ContainsFunc(fns, func(fn string) bool { return strings.HasSuffix(fn, "/cgocall.Through") }) {
				t.Errorf("cgo callback stack stops at the callback: %q", fns)
			}
		}
		if !found {
			t.Error("no stack from the cgo callback")
		}
	}
	// No registration went to a wrapper's entry.
	for _, s := range w.siteList() {
		if s.Site.File == "<autogenerated>" || s.Site.Function == "runtime.call32" {
			t.Errorf("a site in a wrapper: %s", s.Site)
		}
	}
}

// The same through the package-level functions and AddCleanup.
func TestCallShapesPackageLevel(t *testing.T) {
	w := newWatcher(t)
	type obj struct {
		p   *int
		buf [40]byte
	}
	o := &obj{}
	add := AddCleanupTo[obj, int]
	c := add(w, o, func(int) {}, 0) // marker: shape-cleanup-func-value
	defer c.Stop()
	args := []reflect.Value{reflect.ValueOf(w), reflect.ValueOf(o), reflect.ValueOf(func(int) {}), reflect.ValueOf(1)}
	c2 := reflect.ValueOf(AddCleanupTo[obj, int]).Call(args)[0].Interface().(Cleanup) // marker: shape-cleanup-reflect
	defer c2.Stop()
	for _, m := range []string{"shape-cleanup-func-value", "shape-cleanup-reflect"} {
		line := testkit.MarkerLine(t, "callshape_test.go", m)
		if s, ok := siteByLine(w.siteList(), line); !ok || s.Registered != 1 || s.Kind != KindCleanup {
			t.Errorf("%s: site on line %d: %+v (found %v)", m, line, s.Site, ok)
		}
	}
}
