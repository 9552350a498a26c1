// Command app registers finalizers and cleanups in its dependencies (a
// local module, example.com/regs, and github.com/klauspost/compress/zstd)
// and in itself, lets the collector run them, then prints what gcprobe
// saw: the sites in the ledger and, from the Prometheus collector, the
// callbacks the runtime ran outside it.
package main

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"time"

	"example.com/regs"
	"github.com/gcprobe/probe"
	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/klauspost/compress/zstd"
	"github.com/prometheus/client_golang/prometheus"
)

type own struct{ b [8]byte }

func main() {
	reg := prometheus.NewRegistry()
	p, err := probe.Start(probe.WithRegisterer(reg))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer p.Stop()
	before := unwatched(reg)

	// Registrations, their objects dropped at once: the finalizers and
	// the cleanup run at the next cycles.
	want := map[string]uint64{"finalizer": 2, "cleanup": 1}
	regs.Dial()
	regs.NewBox("generic")
	if regs.Extra() != nil {
		want["finalizer"]++
	}
	// DecodeTo makes the shared decoder and sets its finalizer
	// (zstd/simple_go124.go); the input need not be valid.
	zstd.DecodeTo(nil, []byte("not zstd"))
	runtime.SetFinalizer(&own{}, func(*own) {}) // marker: own
	want["finalizer"]++

	// Run the collector until every callback has run, watched or not.
	var after map[string]uint64
	deadline := time.Now().Add(30 * time.Second)
	for {
		runtime.GC()
		after = unwatched(reg)
		done := true
		for kind, n := range want {
			if watchedRan(kind)+after[kind]-before[kind] < n {
				done = false
			}
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			fmt.Fprintln(os.Stderr, "timed out waiting for the finalizers and cleanups to run")
			os.Exit(1)
		}
		time.Sleep(10 * time.Millisecond)
	}

	var lines []string
	for _, s := range allSites() {
		lines = append(lines, fmt.Sprintf("site %s %s:%d registered=%d executed=%d", s.Kind, s.Site.File, s.Site.Line, s.Registered, s.Executed))
	}
	slices.Sort(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	fmt.Printf("unwatched finalizer=%d cleanup=%d\n", after["finalizer"]-before["finalizer"], after["cleanup"]-before["cleanup"])
}

// watchedRan returns how many callbacks of kind the ledger saw run.
func watchedRan(kind string) uint64 {
	var n uint64
	for _, s := range allSites() {
		if s.Kind.String() == kind {
			n += s.Executed
		}
	}
	return n
}

// unwatched returns gcprobe_finalizers_unwatched_total by kind.
func unwatched(reg *prometheus.Registry) map[string]uint64 {
	mfs, err := reg.Gather()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	m := make(map[string]uint64)
	for _, mf := range mfs {
		if mf.GetName() != "gcprobe_finalizers_unwatched_total" {
			continue
		}
		for _, x := range mf.GetMetric() {
			for _, l := range x.GetLabel() {
				if l.GetName() == "kind" {
					m[l.GetValue()] = uint64(x.GetCounter().GetValue())
				}
			}
		}
	}
	return m
}

// allSites reads every site of the ledger, counted exactly now.
func allSites() []finalizerwatch.SiteStats {
	var sn finalizerwatch.Snapshot
	finalizerwatch.Default.Read(&sn, finalizerwatch.ReadOptions{TopK: -1, Fresh: true})
	return sn.Top
}
