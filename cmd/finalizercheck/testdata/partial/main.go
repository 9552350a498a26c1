package main

import (
	"fmt"
	"runtime"
)

type res struct{ h int }

// open's registration is a direct call: -fix rewrites it.
func open(h int) *res {
	r := &res{h: h}
	runtime.SetFinalizer(r, func(*res) {}) // marker: fixable
	return r
}

// register is a function value: -fix cannot rewrite it.
var register = runtime.SetFinalizer // marker: value

// track keeps the runtime.Cleanup: the declared type would have to change
// with the call, so -fix leaves it.
func track(r *res) runtime.Cleanup {
	return runtime.AddCleanup(r, func(int) {}, r.h) // marker: kept
}

func main() {
	r := open(1)
	register(&res{h: 2}, func(*res) {})
	track(r).Stop()
	fmt.Println("ok")
}
