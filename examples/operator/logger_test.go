package main

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/zap"
	"go.uber.org/zap/exp/zapslog"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	crzap "sigs.k8s.io/controller-runtime/pkg/log/zap"

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
	testkit.AwaitGC(t, 10*time.Second, "the forced_gc detector's line in the operator's logger", func() bool {
		return strings.Contains(own.String(), line)
	})
	if got := def.String(); strings.Contains(got, "gcprobe") {
		t.Errorf("slog.Default() got gcprobe's lines, in another format than the operator's:\n%s", got)
	}
}

// TestWarnStaysWarnThroughZap: a program that logs with zap and sends the
// log package into it (zap.RedirectStdLog; Caddy does) gets gcprobe's
// lines through slog.Default() at zap's Info, their level lost in the
// message ("WARN gcprobe: ..."). Through WithLogger and zapslog, a Warn
// is zap's Warn; so it is through controller-runtime's zap logger and
// logr.ToSlogHandler (zapr takes slog records itself, with their level).
func TestWarnStaysWarnThroughZap(t *testing.T) {
	firing := func(t *testing.T, logger *slog.Logger, logs *observer.ObservedLogs) zapcore.Level {
		t.Helper()
		opts := []probe.Option{
			probe.WithRegisterer(prometheus.NewRegistry()),
			probe.WithInterval(10 * time.Millisecond),
			probe.WithSamplerOptions(memstats.WithForcedGC(0.001), memstats.WithCauseHysteresis(0, 0)),
		}
		if logger != nil {
			opts = append(opts, probe.WithLogger(logger))
		}
		p, err := probe.Start(opts...)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Stop()
		var level zapcore.Level
		testkit.AwaitGC(t, 10*time.Second, "the forced_gc detector's line in zap", func() bool {
			for _, e := range logs.All() {
				if strings.Contains(e.Message, "gcprobe: detector firing") {
					level = e.Level
					return true
				}
			}
			return false
		})
		return level
	}

	t.Run("the log package redirected", func(t *testing.T) {
		core, logs := observer.New(zapcore.DebugLevel)
		undo := zap.RedirectStdLog(zap.New(core))
		defer undo()
		if got := firing(t, nil, logs); got != zapcore.InfoLevel {
			t.Errorf("through slog.Default() and the log package: zap level %v, want info (the trap this test documents)", got)
		}
	})
	t.Run("zapslog", func(t *testing.T) {
		core, logs := observer.New(zapcore.DebugLevel)
		if got := firing(t, slog.New(zapslog.NewHandler(core)), logs); got != zapcore.WarnLevel {
			t.Errorf("through WithLogger(zapslog): zap level %v, want warn", got)
		}
	})
	t.Run("controller-runtime's zap under logr", func(t *testing.T) {
		core, logs := observer.New(zapcore.DebugLevel)
		log := crzap.New(crzap.RawZapOpts(zap.WrapCore(func(zapcore.Core) zapcore.Core { return core })))
		if got := firing(t, slog.New(logr.ToSlogHandler(log)), logs); got != zapcore.WarnLevel {
			t.Errorf("through logr.ToSlogHandler: zap level %v, want warn", got)
		}
	})
}
