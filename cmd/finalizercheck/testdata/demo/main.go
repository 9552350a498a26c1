// Command demo registers finalizers and cleanups with the runtime, then
// prints the call sites that finalizerwatch.Default knows of: none, until
// finalizercheck -fix rewrites the calls.
package main

import (
	"fmt"
	"path/filepath"
	"runtime"
	"slices"

	"github.com/gcprobe/probe/finalizerwatch"
)

func main() {
	for i := range 3 {
		dial(i)
	}
	var buffers []*buffer
	for i := range 2 {
		buffers = append(buffers, newBuffer(i))
	}
	var lines []string
	for _, s := range allSites() {
		lines = append(lines, fmt.Sprintf("%s %s:%d registered=%d", s.Kind, filepath.Base(s.Site.File), s.Site.Line, s.Registered))
	}
	slices.Sort(lines)
	fmt.Println("sites:", len(lines))
	for _, l := range lines {
		fmt.Println(l)
	}
	runtime.KeepAlive(buffers)
}

// allSites reads every site of the ledger, counted exactly now.
func allSites() []finalizerwatch.SiteStats {
	var sn finalizerwatch.Snapshot
	finalizerwatch.Default.Read(&sn, finalizerwatch.ReadOptions{TopK: -1, Fresh: true})
	return sn.Top
}
