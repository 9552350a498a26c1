package promexporter

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/stackcapture"
	"github.com/prometheus/client_golang/prometheus"
)

// synthSites returns n synthetic sites, distinct per kind, with classes,
// growth, suspects and counts drawn from small ranges so that ties are
// common.
func synthSites(rng *rand.Rand, n int) []finalizerwatch.SiteStats {
	bounds := finalizerwatch.DurationBounds()
	out := make([]finalizerwatch.SiteStats, n)
	for i := range out {
		s := &out[i]
		s.Kind = finalizerwatch.Kinds[rng.IntN(len(finalizerwatch.Kinds))]
		s.Site = stackcapture.Frame{
			Function: fmt.Sprintf("example.com/app.f%d", rng.IntN(n/4+1)),
			File:     fmt.Sprintf("/src/app/f%d.go", rng.IntN(3)),
			Line:     i + 1, // distinct
		}
		s.Stack = []stackcapture.Frame{s.Site}
		s.Registered = rng.Uint64N(20)
		s.Outstanding = rng.Uint64N(s.Registered + 1)
		s.Suspect = rng.Uint64N(s.Outstanding + 1)
		s.Class = finalizerwatch.Class(rng.IntN(3))
		s.Growth = rng.Uint64N(3) * s.Suspect
		s.Executed = s.Registered - s.Outstanding
		s.Duration = finalizerwatch.Histogram{Bounds: bounds, Counts: make([]uint64, len(bounds)+1)}
		s.Duration.Counts[rng.IntN(len(s.Duration.Counts))] = s.Executed
		s.Duration.Count = s.Executed
		s.Duration.Sum = (time.Duration(s.Executed) * time.Microsecond).Seconds()
	}
	return out
}

// TestCollectAllocsDoNotGrowWithSites checks that, given the ledger, the
// collector's own allocations depend on K, not on the number of sites.
func TestCollectAllocsDoNotGrowWithSites(t *testing.T) {
	allocs := func(n int) float64 {
		sites := synthSites(rand.New(rand.NewPCG(11, 12)), n)
		c := newCollector(t, WithWatcher(newWatcher(t)))
		// The snapshot is built once: what is measured is Collect's own
		// work given a snapshot.
		var sn finalizerwatch.Snapshot
		snapshotOf(&sn, sites, DefaultTopK)
		c.read = func(dst *finalizerwatch.Snapshot) { *dst = sn }
		ch := make(chan prometheus.Metric, 4096)
		drain := func() {
			c.Collect(ch)
			for len(ch) > 0 {
				<-ch
			}
		}
		drain() // grow the scratch buffers and the top K
		return testing.AllocsPerRun(20, drain)
	}
	small, large := allocs(1000), allocs(10000)
	// Two kinds, each K sites and other: three allocations per site (its
	// series, its histogram's bounds and counts), and a few dozen for the
	// self-metrics.
	const limit = 2*(DefaultTopK+1)*3 + 30
	if small != large || large > limit {
		t.Errorf("Collect allocates %v times with 1000 sites, %v with 10000: want at most %d either way", small, large, limit)
	}
}
