package promexporter

import (
	"cmp"
	"slices"
	"strings"

	"github.com/gcprobe/probe/finalizerwatch"
)

// rankOrder orders synthetic sites as the watcher ranks real ones (see
// finalizerwatch's ReadOptions.TopK): growing sites first, by growth, then
// by suspects, outstanding and registered counts, then by name.
func rankOrder(a, b finalizerwatch.SiteStats) int {
	if c := cmp.Compare(b.Class, a.Class); c != 0 {
		return c
	}
	if a.Class == finalizerwatch.ClassGrowing {
		if c := cmp.Compare(b.Growth, a.Growth); c != 0 {
			return c
		}
	}
	for _, c := range []int{cmp.Compare(b.Suspect, a.Suspect), cmp.Compare(b.Outstanding, a.Outstanding),
		cmp.Compare(b.Registered, a.Registered), cmp.Compare(a.Kind, b.Kind), strings.Compare(a.Site.String(), b.Site.String())} {
		if c != 0 {
			return c
		}
	}
	return 0
}

// setSites makes c export the synthetic ledger that sites returns on each
// Collect, as a watcher would snapshot it: per kind, the top K by
// rankOrder and every other site summed under Other.
func setSites(c *Collector, sites func() []finalizerwatch.SiteStats) {
	c.read = func(dst *finalizerwatch.Snapshot) { snapshotOf(dst, sites(), c.cfg.topK) }
}

func snapshotOf(dst *finalizerwatch.Snapshot, sites []finalizerwatch.SiteStats, k int) {
	bounds := finalizerwatch.DurationBounds()
	for kind := range dst.Kinds {
		var of []finalizerwatch.SiteStats
		for _, s := range sites {
			if int(s.Kind) == kind {
				of = append(of, s)
			}
		}
		slices.SortFunc(of, rankOrder)
		ks := finalizerwatch.KindSnapshot{Ranked: len(of)}
		ks.Other = finalizerwatch.SiteStats{Kind: finalizerwatch.Kind(kind),
			Duration: finalizerwatch.Histogram{Bounds: bounds, Counts: make([]uint64, len(bounds)+1)}}
		for i, s := range of {
			if s.Site.Function != "gcprobe.overflow" {
				ks.Tracked++
			}
			if s.Class == finalizerwatch.ClassGrowing {
				ks.Growing++
			}
			if i < k {
				ks.Top = append(ks.Top, s)
				continue
			}
			o := &ks.Other
			o.Counts.Add(s.Counts)
			o.Suspect += s.Suspect
			o.Growth += s.Growth
			o.Class = max(o.Class, s.Class)
			for j, n := range s.Duration.Counts {
				o.Duration.Counts[j] += n
			}
			o.Duration.Count += s.Duration.Count
			o.Duration.Sum += s.Duration.Sum
		}
		dst.Kinds[kind] = ks
	}
}
