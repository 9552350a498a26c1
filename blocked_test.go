package probe_test

import (
	"context"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/gcprobe/probe"
	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/internal/testkit"
	"github.com/gcprobe/probe/memstats"
)

// blocker registers, through w, a finalizer that signals started and
// blocks until release is closed.
func blocker(w *finalizerwatch.Watcher, started chan<- struct{}, release <-chan struct{}) {
	w.SetFinalizer(&leaky{}, func(*leaky) { // marker: root-blocker
		close(started)
		<-release
	})
}

// TestBlockedFinalizerIsNamed: a watched finalizer blocks with 20 000
// finalizers queued behind it. Within 2s of the 1s threshold the probe
// names its site in a finalizer_blocked event, in Report and its text, in
// /metrics, in a span event and in a log line; the queue reads as stalled
// and late. Released, the queue drains and every detector clears.
func TestBlockedFinalizerIsNamed(t *testing.T) {
	w := newWatcher(t)
	reg := prometheus.NewRegistry()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	var logs testkit.SyncBuffer
	p, err := probe.Start(probe.WithRegisterer(reg), probe.WithWatcher(w), probe.WithTracerProvider(tp),
		probe.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))),
		probe.WithSamplerOptions(memstats.WithoutDetector(memstats.DetectorForcedGC)))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()

	started, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock)
	blocker(w, started, release)
	var begin time.Time
	testkit.AwaitGC(t, 10*time.Second, "the blocking finalizer to run", func() bool {
		select {
		case <-started:
			begin = time.Now()
			return true
		default:
			return false
		}
	})
	for range 20000 {
		w.SetFinalizer(&leaky{}, func(*leaky) {})
	}
	runtime.GC() // queues them behind the blocker

	// The site label is "function file:line", with the file's full path.
	site := "/blocked_test.go:" + strconv.Itoa(testkit.MarkerLine(t, "blocked_test.go", "root-blocker"))
	blocked := func(evs []memstats.Event) *memstats.Event {
		for i := range evs {
			if evs[i].Detector == memstats.DetectorFinalizerBlocked {
				return &evs[i]
			}
		}
		return nil
	}
	// The threshold is 1s; named within 2s of it.
	testkit.Poll(t, probe.DefaultInterval+2*time.Second, "finalizer_blocked in Report", func() bool {
		return blocked(p.Report().Firing) != nil
	})
	t.Logf("finalizer_blocked fired %v after the finalizer began", time.Since(begin).Round(time.Millisecond))
	r := p.Report()
	if e := blocked(r.Firing); e == nil || e.Kind != "finalizer" || !strings.HasSuffix(e.Site, site) ||
		!strings.HasPrefix(e.Site, "github.com/gcprobe/probe_test.blocker ") {
		t.Fatalf("finalizer_blocked event %+v, want kind finalizer and site ending %q", e, site)
	}
	if len(r.Running) == 0 || !strings.HasSuffix(r.Running[0].Site.Label(), site) || r.Running[0].For < time.Second {
		t.Fatalf("Report.Running %+v, want the blocker first", r.Running)
	}
	var text strings.Builder
	r.WriteTo(&text)
	if !strings.Contains(text.String(), "finalizer_blocked (") || !strings.Contains(text.String(), "running now: github.com/gcprobe/probe_test.blocker blocked_test.go:") {
		t.Fatalf("report text does not name the blocker:\n%s", text.String())
	}
	t.Logf("report:\n%s", text.String())

	testkit.Poll(t, 5*time.Second, "the log line", func() bool {
		return strings.Contains(logs.String(), `msg="gcprobe: detector firing" detector=finalizer_blocked`) &&
			strings.Contains(logs.String(), site)
	})
	testkit.Poll(t, 5*time.Second, "the span event", func() bool { return spanNamesSite(rec, site) })

	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var running, firing bool
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			switch f.GetName() {
			case "gcprobe_finalizer_running_seconds":
				running = running || strings.HasSuffix(l["site"], site) && m.GetGauge().GetValue() >= 1
			case "gcprobe_detector_firing":
				firing = firing || l["detector"] == memstats.DetectorFinalizerBlocked && m.GetGauge().GetValue() == 1
			}
		}
	}
	if !running || !firing {
		t.Fatalf("/metrics: running series for the blocker %v, finalizer_blocked firing %v", running, firing)
	}
	testkit.Poll(t, 5*time.Second, "finalizer_queue_stalled and queue_latency", func() bool {
		var stalled, late bool
		for _, e := range p.Report().Firing {
			stalled = stalled || e.Detector == memstats.DetectorQueueStalled
			late = late || e.Detector == memstats.DetectorQueueLatency
		}
		return stalled && late
	})

	unblock()
	released := time.Now()
	testkit.Poll(t, 15*time.Second, "the queue to drain and the detectors to clear", func() bool {
		r := p.Report()
		return len(r.Firing) == 0 && r.GC.Finalizers.Length == 0
	})
	t.Logf("all clear %v after the release", time.Since(released).Round(time.Millisecond))
	testkit.Poll(t, 5*time.Second, "the clearing log line", func() bool {
		return strings.Contains(logs.String(), `msg="gcprobe: detector cleared" detector=finalizer_blocked`)
	})
}

func spanNamesSite(rec *tracetest.SpanRecorder, site string) bool {
	for _, s := range rec.Ended() {
		if s.Name() != "gcprobe.detector" {
			continue
		}
		for _, ev := range s.Events() {
			for _, a := range ev.Attributes {
				if a.Key == "gcprobe.detector.site" && strings.HasSuffix(a.Value.AsString(), site) {
					return true
				}
			}
		}
	}
	return false
}
