package stackcapture_test

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/gcprobe/probe/stackcapture"
)

func register(tab *stackcapture.Table) *stackcapture.Stack {
	var pcs [stackcapture.MaxDepth]uintptr
	n := stackcapture.Callers(0, pcs[:])
	return tab.Intern(pcs[:n])
}

func Example() {
	tab, err := stackcapture.NewTable(stackcapture.WithLimit(1024))
	if err != nil {
		panic(err)
	}
	var stacks []*stackcapture.Stack
	for range 3 {
		stacks = append(stacks, register(tab)) // the same stack each time
	}
	site := stacks[0].Site()
	fmt.Println(strings.TrimPrefix(site.Function, "github.com/gcprobe/probe/"), filepath.Base(site.File))
	fmt.Println("stored once:", stacks[0] == stacks[2], tab.Len())
	// Output:
	// stackcapture_test.register example_test.go
	// stored once: true 1
}
