package otlpexporter

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/gcprobe/probe/internal/testkit"
)

// fakeExporter records what it exports. With a gate it blocks each export
// until the gate gives it a result or the export's context ends.
type fakeExporter struct {
	mu       sync.Mutex
	names    []string
	gate     chan error    // nil: no blocking
	entered  chan struct{} // receives once per export, if not nil
	calls    atomic.Int32
	shutdown atomic.Int32
}

func (f *fakeExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	f.calls.Add(1)
	if f.entered != nil {
		f.entered <- struct{}{}
	}
	if f.gate != nil {
		select {
		case err := <-f.gate:
			if err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range spans {
		f.names = append(f.names, s.Name())
	}
	return nil
}

func (f *fakeExporter) Shutdown(context.Context) error {
	f.shutdown.Add(1)
	return nil
}

func (f *fakeExporter) exported() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.names...)
}

func newFakeProvider(t *testing.T, exp *fakeExporter, opts ...Option) *Provider {
	t.Helper()
	opts = append([]Option{WithExporter(exp)}, opts...)
	p, err := NewTracerProvider(context.Background(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.Shutdown(ctx)
	})
	return p
}

func endSpans(tp trace.TracerProvider, names ...string) {
	tr := tp.Tracer("test")
	for _, n := range names {
		_, s := tr.Start(context.Background(), n)
		s.End()
	}
}

func waitEntered(t *testing.T, exp *fakeExporter) {
	t.Helper()
	select {
	case <-exp.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the exporter was not called within 10s")
	}
}

// With the exporter stuck, spans fill the queue and the rest are counted
// as dropped, exactly; once it moves, Shutdown exports what was queued.
func TestDropsCountedWhenQueueFull(t *testing.T) {
	exp := &fakeExporter{gate: make(chan error), entered: make(chan struct{}, 8)}
	p := newFakeProvider(t, exp, WithMaxQueueSize(4), WithMaxExportBatchSize(2), WithBatchTimeout(time.Hour))
	endSpans(p, "a", "b") // a full batch: the loop exports it and blocks
	waitEntered(t, exp)
	endSpans(p, "c", "d", "e", "f", "g", "h") // 4 fit in the queue
	if got := p.Dropped(); got != 2 {
		t.Errorf("Dropped = %d, want 2", got)
	}
	go func() {
		for range 3 {
			exp.gate <- nil
		}
	}()
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if got := exp.exported(); len(got) != 6 || got[0] != "a" || got[5] != "f" {
		t.Errorf("exported %v, want a..f", got)
	}
	if p.Exported() != 6 || p.Failed() != 0 || p.Dropped() != 2 {
		t.Errorf("exported %d failed %d dropped %d, want 6 0 2", p.Exported(), p.Failed(), p.Dropped())
	}
	if exp.shutdown.Load() != 1 {
		t.Errorf("exporter shut down %d times, want 1", exp.shutdown.Load())
	}
	// Spans made after Shutdown go nowhere and block nothing.
	endSpans(p, "late")
	if p.Exported()+p.Failed()+p.Dropped() != 8 {
		t.Errorf("a span ended after Shutdown was counted")
	}
}

// An exporter that never returns cannot hold Shutdown past its deadline:
// the export in flight is aborted, the queue abandoned and counted.
func TestShutdownDeadlineAbortsExport(t *testing.T) {
	exp := &fakeExporter{gate: make(chan error), entered: make(chan struct{}, 8)}
	p := newFakeProvider(t, exp, WithMaxQueueSize(8), WithMaxExportBatchSize(2), WithBatchTimeout(time.Hour))
	endSpans(p, "a", "b")
	waitEntered(t, exp)
	endSpans(p, "c", "d", "e")
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := p.Shutdown(ctx)
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown = %v, want DeadlineExceeded", err)
	}
	// It aims 100ms before the deadline; the slack past it is for a
	// loaded CI machine. Without the abort it would never return.
	if took > 400*time.Millisecond+3*time.Second {
		t.Errorf("Shutdown took %v, well past its 400ms deadline", took)
	}
	if p.Failed() != 2 || p.Dropped() != 3 || p.Exported() != 0 {
		t.Errorf("failed %d dropped %d exported %d, want 2 3 0", p.Failed(), p.Dropped(), p.Exported())
	}
	select {
	case <-p.batcher.done:
	default:
		t.Error("the processor's goroutine outlived Shutdown")
	}
}

// Once an export fails at shutdown, the rest is abandoned instead of being
// tried against a collector that is not there.
func TestShutdownStopsAtFirstFailure(t *testing.T) {
	exp := &fakeExporter{gate: make(chan error, 16), entered: make(chan struct{}, 16)}
	p := newFakeProvider(t, exp, WithMaxQueueSize(16), WithMaxExportBatchSize(2), WithBatchTimeout(time.Hour))
	endSpans(p, "a", "b")
	waitEntered(t, exp)
	endSpans(p, "c", "d", "e", "f", "g", "h", "i", "j")
	for range 16 {
		exp.gate <- errors.New("connection refused")
	}
	if err := p.Shutdown(context.Background()); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("Shutdown = %v, want the export's error", err)
	}
	// The loop may try a batch or two more, or all of them, before it sees
	// the stop; after that, one failure ends the flush.
	if p.Exported() != 0 || p.Failed()+p.Dropped() != 10 {
		t.Errorf("exported %d failed %d dropped %d", p.Exported(), p.Failed(), p.Dropped())
	}
}

func TestForceFlush(t *testing.T) {
	exp := &fakeExporter{}
	p := newFakeProvider(t, exp, WithBatchTimeout(time.Hour))
	endSpans(p, "a", "b", "c")
	if err := p.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := exp.exported(); len(got) != 3 {
		t.Errorf("after ForceFlush the exporter has %v, want 3 spans", got)
	}
	if p.Exported() != 3 {
		t.Errorf("Exported = %d", p.Exported())
	}
}

func TestForceFlushHonoursContext(t *testing.T) {
	exp := &fakeExporter{gate: make(chan error), entered: make(chan struct{}, 8)}
	p := newFakeProvider(t, exp, WithMaxExportBatchSize(1), WithBatchTimeout(time.Hour))
	endSpans(p, "a")
	waitEntered(t, exp)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := p.ForceFlush(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("ForceFlush with a stuck exporter = %v, want DeadlineExceeded", err)
	}
	close(exp.gate)
}

func TestBatchTimeoutExports(t *testing.T) {
	exp := &fakeExporter{}
	p := newFakeProvider(t, exp, WithBatchTimeout(10*time.Millisecond))
	endSpans(p, "a")
	testkit.Poll(t, 10*time.Second, "a lone span exported after a 10ms batch timeout", func() bool { return p.Exported() == 1 })
}

func TestUnsampledSpansIgnored(t *testing.T) {
	exp := &fakeExporter{}
	p := newFakeProvider(t, exp, WithTracerProviderOptions(sdktrace.WithSampler(sdktrace.NeverSample())))
	endSpans(p, "a", "b")
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if p.Exported()+p.Dropped()+p.Failed() != 0 || len(exp.exported()) != 0 {
		t.Errorf("unsampled spans were processed")
	}
}

func TestShutdownTwice(t *testing.T) {
	exp := &fakeExporter{}
	p := newFakeProvider(t, exp)
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Errorf("second Shutdown: %v", err)
	}
	if exp.shutdown.Load() != 1 {
		t.Errorf("exporter shut down %d times", exp.shutdown.Load())
	}
}
