// Package ledgertest reads a finalizerwatch ledger for tests, each figure
// through the one read API, (*finalizerwatch.Watcher).Read: every site,
// the top n, a kind's totals, the clocks. Each call is a read of its own
// (a fresh ranking where counts must be exact), which a test can afford
// and an exporter should not: exporters read one Snapshot per scrape.
package ledgertest

import "github.com/gcprobe/probe/finalizerwatch"

// Sites returns every site of both kinds with its stack, in rank order,
// counted exactly now.
func Sites(w *finalizerwatch.Watcher) []finalizerwatch.SiteStats { return Top(w, 0) }

// Top returns the n best-ranked sites (every site for n <= 0) with their
// stacks, counted exactly now.
func Top(w *finalizerwatch.Watcher, n int) []finalizerwatch.SiteStats {
	if n <= 0 {
		n = -1
	}
	var sn finalizerwatch.Snapshot
	w.Read(&sn, finalizerwatch.ReadOptions{TopK: n, Stacks: true, Fresh: true})
	return sn.Top
}

// Totals returns the ledger of kind k summed over every site, exactly now.
func Totals(w *finalizerwatch.Watcher, k finalizerwatch.Kind) finalizerwatch.Totals {
	var sn finalizerwatch.Snapshot
	w.Read(&sn, finalizerwatch.ReadOptions{Fresh: true})
	return sn.Kinds[k].Totals
}

// read is a read of nothing but the live figures (clocks, overflow,
// running callbacks), ranking only if the ledger never was.
func read(w *finalizerwatch.Watcher, opts finalizerwatch.ReadOptions) *finalizerwatch.Snapshot {
	var sn finalizerwatch.Snapshot
	opts.Unranked = true
	w.Read(&sn, opts)
	return &sn
}

// Cycles returns the GC cycles of kind k the watcher has counted.
func Cycles(w *finalizerwatch.Watcher, k finalizerwatch.Kind) uint64 {
	return read(w, finalizerwatch.ReadOptions{}).Cycles[k]
}

// ClocksAdvanced returns, for testkit.AwaitGC, the condition that both of
// w's GC clocks (finalizers' and cleanups') have counted n cycles more
// than they have now.
func ClocksAdvanced(w *finalizerwatch.Watcher, n uint64) func() bool {
	fin, cln := Cycles(w, finalizerwatch.KindFinalizer)+n, Cycles(w, finalizerwatch.KindCleanup)+n
	return func() bool {
		return Cycles(w, finalizerwatch.KindFinalizer) >= fin && Cycles(w, finalizerwatch.KindCleanup) >= cln
	}
}

// ClocksAt returns, for testkit.Poll, the condition that both of w's GC
// clocks have counted at least n cycles: for a test that forces each
// cycle itself and waits for the watcher to count it.
func ClocksAt(w *finalizerwatch.Watcher, n uint64) func() bool {
	return func() bool {
		return Cycles(w, finalizerwatch.KindFinalizer) >= n && Cycles(w, finalizerwatch.KindCleanup) >= n
	}
}

// MoreCyclesNeeded returns the Snapshot's MoreCyclesNeeded.
func MoreCyclesNeeded(w *finalizerwatch.Watcher) int {
	return read(w, finalizerwatch.ReadOptions{}).MoreCyclesNeeded
}

// Overflow returns what the watcher's bounded tables refused.
func Overflow(w *finalizerwatch.Watcher) finalizerwatch.Overflow {
	return read(w, finalizerwatch.ReadOptions{}).Overflow
}

// Running returns the callbacks running now, the longest running first.
func Running(w *finalizerwatch.Watcher) []finalizerwatch.RunningCallback {
	return read(w, finalizerwatch.ReadOptions{}).Running
}

// StackSamples returns the sampled stacks of kind k.
func StackSamples(w *finalizerwatch.Watcher, k finalizerwatch.Kind) []finalizerwatch.StackSample {
	var out []finalizerwatch.StackSample
	for _, s := range read(w, finalizerwatch.ReadOptions{StackSamples: true}).StackSamples {
		if s.Kind == k {
			out = append(out, s)
		}
	}
	return out
}

// Entries returns every ledger entry (with full stacks, one per stack).
func Entries(w *finalizerwatch.Watcher) []finalizerwatch.Entry {
	return read(w, finalizerwatch.ReadOptions{Entries: true}).Entries
}
