// Package values uses the functions as values: reported, never fixed.
package values

import "runtime"

var set = runtime.SetFinalizer // want `^runtime\.SetFinalizer bypasses the finalizerwatch ledger: use finalizerwatch\.SetFinalizer \(no automatic fix: it is used as a function value, not called; replace it by hand\)$`

func apply(f func(any, any)) {}

func Values() {
	add := runtime.AddCleanup[int, int] // want `runtime\.AddCleanup .*no automatic fix: it is used as a function value`
	_ = add
	apply(runtime.SetFinalizer)   // want `runtime\.SetFinalizer .*no automatic fix: it is used as a function value`
	apply((runtime.SetFinalizer)) // want `runtime\.SetFinalizer .*no automatic fix: it is used as a function value`
}

// A method of the same name is not runtime's.
type tracker struct{}

func (tracker) SetFinalizer(any, any) {}

func Method() { tracker{}.SetFinalizer(nil, nil) }
