package main

import (
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/gcprobe/probe"
	"github.com/gcprobe/probe/internal/testkit"
	"github.com/gcprobe/probe/memstats"
)

// TestProbeLogsThroughTheOperatorsLogger starts a probe with the
// operator's options and a logger of the operator's format, and makes a
// detector fire (one forced GC cycle, with the threshold lowered): its
// line comes out through that logger, and nothing of gcprobe's through
// slog.Default(). A site growing is logged through the same logger; a
// detector is the quick way to make the probe say something.
func TestProbeLogsThroughTheOperatorsLogger(t *testing.T) {
	var def, own testkit.SyncBuffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&def, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })

	opts := append(probeOptions(noop.NewTracerProvider(), slog.New(slog.NewTextHandler(&own, nil))),
		probe.WithRegisterer(prometheus.NewRegistry()), // not metrics.Registry: other tests register there
		probe.WithInterval(10*time.Millisecond),
		probe.WithSamplerOptions(memstats.WithForcedGC(0.001), memstats.WithCauseHysteresis(0, 0)))
	p, err := probe.Start(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()

	const line = `level=WARN msg="gcprobe: detector firing" detector=forced_gc`
	testkit.Poll(t, 10*time.Second, "the forced_gc detector's line in the operator's logger", func() bool {
		runtime.GC()
		return strings.Contains(own.String(), line)
	})
	if got := def.String(); strings.Contains(got, "gcprobe") {
		t.Errorf("slog.Default() got gcprobe's lines, in another format than the operator's:\n%s", got)
	}
}
