package promexporter

import (
	"slices"

	"github.com/gcprobe/probe/finalizerwatch"
)

// setSites makes c export the synthetic ledger that sites returns on each
// Collect, as a watcher would snapshot it: per kind, the top K by
// finalizerwatch.CompareRank and every other site summed under Other.
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
		slices.SortFunc(of, func(a, b finalizerwatch.SiteStats) int { return finalizerwatch.CompareRank(&a, &b) })
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
			o.Registered += s.Registered
			o.Executed += s.Executed
			o.Cleared += s.Cleared
			o.Outstanding += s.Outstanding
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
