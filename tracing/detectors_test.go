package tracing

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gcprobe/probe/internal/testkit"
	"github.com/gcprobe/probe/memstats"
)

// A real sampler's forced_gc detector, fired by runtime.GC, reaches the
// trace as a gcprobe.detector span from the reporter's goroutine.
func TestDetectorSpan(t *testing.T) {
	s := newSampler(t, memstats.WithForcedGC(0.001), memstats.WithCauseHysteresis(0, 0))
	tp, rec := newRecorder(t)
	r := newReporter(t, WithTracerProvider(tp), WithWatcher(newWatcher(t)), WithSampler(s))
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	s.Sample()
	runtime.GC()
	// Sample runs the round, and the subscribed handler, on this
	// goroutine; the span is made by the reporter's.
	s.Sample()
	testkit.Poll(t, 20*time.Second, "a gcprobe.detector span", func() bool { return len(spansNamed(rec, "gcprobe.detector")) > 0 })

	span := spansNamed(rec, "gcprobe.detector")[0]
	a := attrs(t, span.Attributes())
	if a["gcprobe.detector.dropped"] != int64(0) || a["gcprobe.detector.events"] != int64(len(span.Events())) {
		t.Errorf("span attributes %v with %d events", a, len(span.Events()))
	}
	var found bool
	for _, e := range span.Events() {
		if e.Name != "gcprobe.detector" {
			t.Errorf("event named %q", e.Name)
		}
		ea := attrs(t, e.Attributes)
		if ea["gcprobe.detector.name"] != memstats.DetectorForcedGC {
			continue
		}
		found = true
		if ea["gcprobe.detector.firing"] != true || ea["gcprobe.detector.threshold"] != 0.001 {
			t.Errorf("forced_gc event %v", ea)
		}
		if v, _ := ea["gcprobe.detector.value"].(float64); v < 0.001 {
			t.Errorf("forced_gc value %v, want >= the threshold", v)
		}
		since, _ := ea["gcprobe.detector.since"].(string)
		if _, err := time.Parse(time.RFC3339Nano, since); err != nil {
			t.Errorf("since %q: %v", since, err)
		}
		// forced_gc is a cause: its firing event says it, and the fix.
		if len(ea) != 7 || ea["gcprobe.detector.cause"] == nil || ea["gcprobe.detector.fix"] == nil {
			t.Errorf("event has %d attributes, want 7 with the cause and the fix: %v", len(ea), ea)
		}
		if e.Time.IsZero() || span.StartTime().After(e.Time) || span.EndTime().Before(e.Time) {
			t.Errorf("event at %v outside its span %v..%v", e.Time, span.StartTime(), span.EndTime())
		}
	}
	if !found {
		t.Fatalf("no forced_gc event in %v", span.Events())
	}

	// Stopped, the reporter no longer listens.
	r.Stop()
	n := len(rec.Ended())
	s.Sample()
	if got := len(rec.Ended()); got != n {
		t.Errorf("%d spans after Stop, want %d", got, n)
	}
}

// The handler never blocks the sampler: past the queue's bound, events are
// counted as dropped and reported with the next span.
func TestDetectorQueueBound(t *testing.T) {
	tp, rec := newRecorder(t)
	r := newReporter(t, WithTracerProvider(tp), WithWatcher(newWatcher(t)))
	now := time.Now()
	for range DefaultDetectorQueue + 5 {
		r.dets.push(memstats.Event{Detector: memstats.DetectorQueueLatency, Time: now, Since: now, Firing: true})
	}
	r.reportDetectors(t.Context())
	spans := spansNamed(rec, "gcprobe.detector")
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1", len(spans))
	}
	a := attrs(t, spans[0].Attributes())
	if a["gcprobe.detector.dropped"] != int64(5) || a["gcprobe.detector.events"] != int64(DefaultDetectorQueue) ||
		len(spans[0].Events()) != DefaultDetectorQueue {
		t.Errorf("attributes %v, %d events", a, len(spans[0].Events()))
	}
	r.reportDetectors(t.Context())
	if got := len(spansNamed(rec, "gcprobe.detector")); got != 1 {
		t.Errorf("an empty queue made a span: %d spans", got)
	}
}

// A finalizer_blocked event carries the blocking callback's kind and site.
func TestDetectorEventNamesBlockedSite(t *testing.T) {
	tp, rec := newRecorder(t)
	r := newReporter(t, WithTracerProvider(tp), WithWatcher(newWatcher(t)))
	now := time.Now()
	r.dets.push(memstats.Event{Detector: memstats.DetectorFinalizerBlocked, Value: 2, Threshold: 1,
		Kind: "finalizer", Site: "main.(*conn).finalize main.go:42", Time: now, Since: now.Add(-2 * time.Second), Firing: true})
	r.dets.push(memstats.Event{Detector: memstats.DetectorQueueLatency, Time: now, Since: now, Firing: true})
	r.reportDetectors(t.Context())
	spans := spansNamed(rec, "gcprobe.detector")
	if len(spans) != 1 || len(spans[0].Events()) != 2 {
		t.Fatalf("%d spans", len(spans))
	}
	blocked := attrs(t, spans[0].Events()[0].Attributes)
	if blocked["gcprobe.detector.site"] != "main.(*conn).finalize main.go:42" || blocked["gcprobe.detector.kind"] != "finalizer" {
		t.Errorf("finalizer_blocked event %v", blocked)
	}
	if other := attrs(t, spans[0].Events()[1].Attributes); len(other) != 5 {
		t.Errorf("queue_latency event has %d attributes, want 5 (no site): %v", len(other), other)
	}
}

func TestDetectorEventSaysCause(t *testing.T) {
	tp, rec := newRecorder(t)
	r := newReporter(t, WithTracerProvider(tp), WithWatcher(newWatcher(t)))
	now := time.Now()
	r.dets.push(memstats.Event{Detector: memstats.DetectorAllocationDriven, Value: 412, Threshold: 60, Time: now, Since: now, Firing: true})
	r.dets.push(memstats.Event{Detector: memstats.DetectorAllocationDriven, Value: 12, Threshold: 60, Time: now, Since: now})
	r.reportDetectors(t.Context())
	spans := spansNamed(rec, "gcprobe.detector")
	if len(spans) != 1 || len(spans[0].Events()) != 2 {
		t.Fatalf("%d spans", len(spans))
	}
	fired := attrs(t, spans[0].Events()[0].Attributes)
	if c, _ := fired["gcprobe.detector.cause"].(string); !strings.HasPrefix(c, "allocation-driven: 412 GC cycles a minute nobody forced (threshold 60)") {
		t.Errorf("firing cause event: cause %q", c)
	}
	if _, ok := attrs(t, spans[0].Events()[1].Attributes)["gcprobe.detector.cause"]; ok {
		t.Error("a resolving event carries the cause in words")
	}
}
