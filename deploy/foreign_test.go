package deploy

import (
	"regexp"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	// Registers controller-runtime's reconcile metrics on its
	// metrics.Registry, as any operator built on it does.
	_ "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// foreignHistograms are the histograms among the foreign series the alert
// rules query (Describe does not tell a histogram from a gauge).
var foreignHistograms = map[string]bool{"controller_runtime_reconcile_time_seconds": true}

// foreignMetricNames are the series that the source article's thresholds
// are on and that other collectors already export, so that gcprobe does
// not duplicate them: what controller-runtime's metrics.Registry (its
// reconcile metrics and Go collector) and client_golang's default Go
// collector Describe. The names come from the real collectors, so a rename
// upstream fails the rules test rather than an alert that never fires.
var foreignMetricNames = sync.OnceValue(func() map[string]bool {
	names := map[string]bool{}
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	ch := make(chan *prometheus.Desc, 256)
	go func() {
		metrics.Registry.(prometheus.Collector).Describe(ch)
		collectors.NewGoCollector().Describe(ch)
		close(ch)
	}()
	for d := range ch {
		m := fqName.FindStringSubmatch(d.String())
		if m == nil {
			continue
		}
		if foreignHistograms[m[1]] {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				names[m[1]+suffix] = true
			}
			continue
		}
		names[m[1]] = true
	}
	return names
})
