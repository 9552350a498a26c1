//go:build !gcprobe_sites

package bench

import "github.com/gcprobe/probe/finalizerwatch"

// generatedSites is the number of distinct registration lines compiled in:
// none in this build. bench/run.sh builds with -tags gcprobe_sites and an
// -overlay holding the output of bench/internal/gensites.
const generatedSites = 0

func registerAtSite(*finalizerwatch.Watcher, *siteObj, int) finalizerwatch.Cleanup {
	panic("bench: no generated sites in this build (see sites_test.go)")
}
