package promexporter

import (
	"bytes"
	"cmp"
	"slices"
	"strconv"
	"strings"

	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/stackcapture"
)

// numKinds is the number of finalizerwatch.Kind values.
const numKinds = len(finalizerwatch.Kinds)

// rankCompare orders sites as finalizerwatch's Top does: negative when a
// ranks before b. Top sorts every site, symbolized names included, on each
// call; the collector needs only the first K of each kind, so it selects
// them itself with this order from one Sites call, without sorting the rest.
// TestRankMatchesTop keeps the two orders the same.
func rankCompare(a, b *finalizerwatch.SiteStats) int {
	if c := cmp.Compare(b.Score, a.Score); c != 0 {
		return c
	}
	if c := cmp.Compare(b.Suspect, a.Suspect); c != 0 {
		return c
	}
	if c := cmp.Compare(b.Outstanding, a.Outstanding); c != 0 {
		return c
	}
	if c := cmp.Compare(b.Registered, a.Registered); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Kind, b.Kind); c != 0 {
		return c
	}
	return compareSiteName(a.Site, b.Site)
}

// compareSiteName compares a.String() with b.String() ("function
// file:line") without building either string, which would cost two
// allocations per comparison; ties on everything else are common (every
// healthy site scores 0), so this comparison runs often.
func compareSiteName(a, b stackcapture.Frame) int {
	unknown := func(f stackcapture.Frame) bool { return f.Function == "" && f.File == "" }
	if unknown(a) || unknown(b) {
		return strings.Compare(a.String(), b.String())
	}
	if c, done := comparePart(a.Function, b.Function, ' '); done {
		if c == 0 { // a separator matched a byte of the other name
			return strings.Compare(a.String(), b.String())
		}
		return c
	}
	if c, done := comparePart(a.File, b.File, ':'); done {
		if c == 0 {
			return strings.Compare(a.String(), b.String())
		}
		return c
	}
	var x, y [20]byte
	return bytes.Compare(strconv.AppendInt(x[:0], int64(a.Line), 10), strconv.AppendInt(y[:0], int64(b.Line), 10))
}

// comparePart compares x+sep+... with y+sep+...: done is false when x == y
// (the comparison goes on with the next part). When one is a prefix of the
// other, the shorter one's next byte is sep; if that equals the longer
// one's next byte the result is 0 with done set, and the caller falls back
// to comparing whole strings.
func comparePart(x, y string, sep byte) (c int, done bool) {
	if x == y {
		return 0, false
	}
	n := min(len(x), len(y))
	for i := range n {
		if x[i] != y[i] {
			return cmp.Compare(x[i], y[i]), true
		}
	}
	if len(x) < len(y) {
		return cmp.Compare(sep, y[n]), true
	}
	return cmp.Compare(x[n], sep), true
}

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
