// Package middle imports runtime between other imports, for one call.
package middle

import (
	"fmt"
	"runtime"
	"strings"
)

type obj struct {
	name string
	_    [16]byte
}

func New(name string) *obj {
	o := &obj{name: strings.ToUpper(name)}
	runtime.AddCleanup(o, func(n string) { fmt.Println(n) }, o.name) // want `runtime\.AddCleanup bypasses`
	return o
}
