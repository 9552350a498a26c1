// Package renamed imports runtime under another name and instantiates
// AddCleanup explicitly.
package renamed

import (
	rt "runtime"
	"sync"
)

type conn struct {
	id int
	_  [24]byte
}

var mu sync.Mutex

func Dial(id int) *conn {
	c := &conn{id: id}
	rt.SetFinalizer(c, func(*conn) {})            // want `runtime\.SetFinalizer bypasses`
	(rt.SetFinalizer)(c, nil)                     // want `runtime\.SetFinalizer bypasses`
	rt.AddCleanup[conn, int](c, func(int) {}, id) // want `runtime\.AddCleanup bypasses`
	rt.AddCleanup[conn](c, func(int) {}, id)      // want `runtime\.AddCleanup bypasses`
	rt.KeepAlive(c)
	return c
}
