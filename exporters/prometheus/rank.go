package promexporter

import (
	"slices"

	"github.com/gcprobe/probe/finalizerwatch"
)

// numKinds is the number of finalizerwatch.Kind values.
const numKinds = len(finalizerwatch.Kinds)

// rankCompare orders sites as finalizerwatch's Top does. Top sorts every
// site on each call; the collector needs only the first K of each kind, so
// it selects them itself with the same order, without sorting the rest.
func rankCompare(a, b *finalizerwatch.SiteStats) int { return finalizerwatch.CompareRank(a, b) }

// selectTop sets top[k] to the indices into sites of the k best-ranked
// sites of kind k (at most n of them), best first, reusing top's slices.
// It costs O(len(sites) · log n) comparisons and allocates only to grow
// top. Sites of an unknown kind are ignored. Collect runs the same steps
// (resetTop, offerTop for each site, finishTop) inside its one pass over
// the ledger.
func selectTop(sites []finalizerwatch.SiteStats, n int, top *[numKinds][]int) {
	resetTop(top)
	for i := range sites {
		offerTop(sites, i, n, top)
	}
	finishTop(sites, top)
}

func resetTop(top *[numKinds][]int) {
	for k := range top {
		top[k] = top[k][:0]
	}
}

// offerTop considers sites[i] for the top n of its kind. top[k] is a heap
// whose root is its worst-ranked site: a site better than the root
// replaces it.
func offerTop(sites []finalizerwatch.SiteStats, i, n int, top *[numKinds][]int) {
	k := int(sites[i].Kind)
	if k >= numKinds {
		return
	}
	// worse reports whether sites[x] ranks after sites[y].
	worse := func(x, y int) bool { return rankCompare(&sites[x], &sites[y]) > 0 }
	h := top[k]
	if len(h) < n {
		h = append(h, i)
		heapUp(h, len(h)-1, worse)
	} else if worse(h[0], i) {
		h[0] = i
		heapDown(h, 0, worse)
	}
	top[k] = h
}

// finishTop sorts each kind's selection, best first.
func finishTop(sites []finalizerwatch.SiteStats, top *[numKinds][]int) {
	for k := range top {
		slices.SortFunc(top[k], func(i, j int) int { return rankCompare(&sites[i], &sites[j]) })
	}
}

// heapUp and heapDown maintain a binary heap of indices whose root is the
// element ranked worst, by worse. Written out rather than container/heap,
// whose interface methods would allocate for each push.
func heapUp(h []int, i int, worse func(i, j int) bool) {
	for i > 0 {
		p := (i - 1) / 2
		if !worse(h[i], h[p]) {
			return
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func heapDown(h []int, i int, worse func(i, j int) bool) {
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		w := l
		if r := l + 1; r < len(h) && worse(h[r], h[l]) {
			w = r
		}
		if !worse(h[w], h[i]) {
			return
		}
		h[i], h[w] = h[w], h[i]
		i = w
	}
}
