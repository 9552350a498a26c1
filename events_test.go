package probe_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gcprobe/probe"
	"github.com/gcprobe/probe/internal/testkit"
	"github.com/gcprobe/probe/memstats"
)

// Without WithLogger, detector events go to slog's default logger, at
// Warn; with it, to the logger given, and nothing to the default.
func TestDetectorEventsAreLogged(t *testing.T) {
	var def, own testkit.SyncBuffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&def, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })

	start := func(opts ...probe.Option) *probe.Probe {
		t.Helper()
		opts = append(opts, probe.WithRegisterer(prometheus.NewRegistry()), probe.WithWatcher(newWatcher(t)),
			probe.WithInterval(10*time.Millisecond),
			probe.WithSamplerOptions(memstats.WithForcedGC(0.001), memstats.WithCauseHysteresis(0, 0))) // one forced cycle fires it, at once
		p, err := probe.Start(opts...)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	const line = `level=WARN msg="gcprobe: detector firing" detector=forced_gc value=`

	p := start()
	testkit.AwaitGC(t, 10*time.Second, "forced_gc in slog's default logger", func() bool {
		return strings.Contains(def.String(), line)
	})
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}

	n := len(def.String())
	p = start(probe.WithLogger(slog.New(slog.NewTextHandler(&own, nil))))
	defer p.Stop()
	testkit.AwaitGC(t, 10*time.Second, "forced_gc in the given logger", func() bool {
		return strings.Contains(own.String(), line)
	})
	if got := def.String()[n:]; strings.Contains(got, "gcprobe") {
		t.Fatalf("the default logger got, with WithLogger given:\n%s", got)
	}
}
