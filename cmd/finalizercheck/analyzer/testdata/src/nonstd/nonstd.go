// Package nonstd has a group of non-standard imports: the new import joins
// it.
package nonstd

import (
	"fmt"
	"runtime"

	"example.com/other"
)

type obj struct{ _ [16]byte }

func New() *obj {
	o := &obj{}
	runtime.SetFinalizer(o, func(*obj) { fmt.Println(other.Name) }) // want `runtime\.SetFinalizer bypasses`
	runtime.SetFinalizer(o, nil)                                    // want `runtime\.SetFinalizer bypasses`
	return o
}
