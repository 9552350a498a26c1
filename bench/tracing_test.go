package bench

import (
	"context"

	"go.opentelemetry.io/otel/trace"

	"github.com/gcprobe/probe"
	"github.com/gcprobe/probe/tracing"
)

// tracingRun is a tracing.Reporter on the probe's watcher and sampler,
// for the full mode: probe.WithTracerProvider hands the provider to the
// probe, and this reporter is what turns the ledger and the GC into spans.
type tracingRun struct {
	r *tracing.Reporter
}

func startTracing(p *probe.Probe, tp trace.TracerProvider) (*tracingRun, error) {
	r, err := tracing.New(
		tracing.WithTracerProvider(tp),
		tracing.WithWatcher(p.Watcher()),
		tracing.WithSampler(p.Sampler()),
		tracing.WithLeakReportInterval(leakReportInterval),
	)
	if err != nil {
		return nil, err
	}
	if err := r.Start(); err != nil {
		return nil, err
	}
	return &tracingRun{r: r}, nil
}

// reportNow emits a leak report at once, for tests.
func (t *tracingRun) reportNow() { t.r.ReportNow(context.Background()) }

func (t *tracingRun) stop() error {
	t.r.Stop()
	return nil
}
