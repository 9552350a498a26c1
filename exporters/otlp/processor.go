package otlpexporter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// batcher is a bounded batching span processor. It does what the SDK's
// BatchSpanProcessor does, plus what that one cannot: it counts the spans
// it drops (the SDK's drops silently when its queue is full), and its
// Shutdown gives up on an unreachable collector by its deadline and still
// ends its goroutine, where the SDK's returns at the deadline but keeps
// exporting in the background.
//
// OnEnd never blocks: a span goes into a buffered channel of maxQueue or is
// counted as dropped. One goroutine takes spans off the channel into a
// batch of at most maxBatch, exported when full, every delay, on
// ForceFlush, and on Shutdown. Memory is bounded by the channel, one batch,
// and the exporter's one request in flight.
type batcher struct {
	exp sdktrace.SpanExporter
	cfg batchConfig
	log *slog.Logger

	queue chan sdktrace.ReadOnlySpan
	flush chan chan struct{}
	stop  chan struct{}
	done  chan struct{}

	// abortCtx parents every export; abort cancels it, which cuts the
	// export in flight short and makes the loop abandon what is queued.
	abortCtx context.Context
	abort    context.CancelFunc

	stopping atomic.Bool
	stopOnce sync.Once

	// failedStopping is set by an export that fails once Shutdown has
	// been called, the export in flight at that moment included: the
	// first failed export of the shutdown, after which nothing more is
	// tried.
	failedStopping atomic.Bool

	dropped, exported, failed atomic.Uint64

	// Owned by the loop until done is closed.
	failing bool  // whether the latest export failed
	lastErr error // the latest export's error
	stopErr error // what Shutdown reports of the final drain
}

// batchConfig bounds a batcher.
type batchConfig struct {
	maxQueue      int
	maxBatch      int
	delay         time.Duration
	exportTimeout time.Duration
}

var _ sdktrace.SpanProcessor = (*batcher)(nil)

func newBatcher(exp sdktrace.SpanExporter, cfg batchConfig, log *slog.Logger) *batcher {
	b := &batcher{
		exp:   exp,
		cfg:   cfg,
		log:   log,
		queue: make(chan sdktrace.ReadOnlySpan, cfg.maxQueue),
		flush: make(chan chan struct{}),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	b.abortCtx, b.abort = context.WithCancel(context.Background())
	go b.run()
	return b
}

// OnStart does nothing: spans are queued when they end.
func (b *batcher) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

// OnEnd queues s for export without blocking, or counts it as dropped
// when the queue is full or the processor is shut down.
func (b *batcher) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return
	}
	if b.stopping.Load() {
		b.dropped.Add(1)
		return
	}
	select {
	case b.queue <- s:
	default:
		b.dropped.Add(1)
	}
}

// run is the processor's goroutine.
func (b *batcher) run() {
	defer close(b.done)
	batch := make([]sdktrace.ReadOnlySpan, 0, b.cfg.maxBatch)
	timer := time.NewTimer(b.cfg.delay)
	defer timer.Stop()
	for {
		select {
		case s := <-b.queue:
			batch = append(batch, s)
			if b.stopping.Load() {
				// Shutdown has begun: select may go on picking queued
				// spans over the closed stop channel, so finish here,
				// where an export in flight that failed stops the drain.
				b.finish(batch)
				return
			}
			if len(batch) == b.cfg.maxBatch {
				batch, _ = b.export(batch)
				// Since Go 1.23, Reset needs no drained channel.
				timer.Reset(b.cfg.delay)
			}
		case <-timer.C:
			if b.stopping.Load() {
				b.finish(batch)
				return
			}
			batch, _ = b.export(batch)
			timer.Reset(b.cfg.delay)
		case ack := <-b.flush:
			batch = b.drain(batch, len(b.queue))
			close(ack)
		case <-b.stop:
			b.finish(batch)
			return
		}
	}
}

// finish is the run loop's end, once Shutdown has begun: export
// everything, unless an export fails. Then the collector is unreachable,
// and trying batch after batch would only make Shutdown wait export
// timeout after export timeout: what is left is abandoned. The export that
// was in flight when Shutdown was called counts: if it failed, nothing
// more is tried.
func (b *batcher) finish(batch []sdktrace.ReadOnlySpan) {
	if !b.failedStopping.Load() {
		batch = b.drain(batch, -1)
	}
	n := b.abandon(batch)
	switch {
	case n > 0 && b.lastErr != nil:
		b.stopErr = fmt.Errorf("otlpexporter: shutdown: %d spans abandoned after a failed export: %w", n, b.lastErr)
	case b.lastErr != nil:
		// Everything was tried before the stop, and the last export
		// failed: the collector is still unreachable.
		b.stopErr = fmt.Errorf("otlpexporter: shutdown: the last export failed: %w", b.lastErr)
	}
}

// drain exports batch and up to n queued spans (all of them when n < 0),
// a batch at a time, stopping at the first failure. It returns the batch,
// empty unless an export failed before the queue was taken.
func (b *batcher) drain(batch []sdktrace.ReadOnlySpan, n int) []sdktrace.ReadOnlySpan {
	for {
		for len(batch) < b.cfg.maxBatch && n != 0 {
			select {
			case s := <-b.queue:
				batch = append(batch, s)
				if n > 0 {
					n--
				}
			default:
				n = 0 // the queue is empty
			}
		}
		if len(batch) == 0 {
			return batch
		}
		var err error
		if batch, err = b.export(batch); err != nil || n == 0 {
			return batch
		}
	}
}

// abandon counts batch and whatever is still queued as dropped, and
// returns how many that was.
func (b *batcher) abandon(batch []sdktrace.ReadOnlySpan) uint64 {
	n := uint64(len(batch))
	clear(batch)
	for {
		select {
		case <-b.queue:
			n++
		default:
			b.dropped.Add(n)
			return n
		}
	}
}

// export sends batch to the exporter and returns it emptied, with the
// exporter's error. After an abort it sends nothing: the batch counts as
// dropped.
func (b *batcher) export(batch []sdktrace.ReadOnlySpan) ([]sdktrace.ReadOnlySpan, error) {
	if len(batch) == 0 {
		return batch, nil
	}
	n := uint64(len(batch))
	if err := b.abortCtx.Err(); err != nil {
		b.dropped.Add(n)
		clear(batch)
		return batch[:0], err
	}
	ctx, cancel := context.WithTimeout(b.abortCtx, b.cfg.exportTimeout)
	err := b.exp.ExportSpans(ctx, batch)
	cancel()
	b.lastErr = err
	// The exporter is done with the spans: drop the references so the
	// batch's array does not keep them alive.
	clear(batch)
	if err != nil {
		b.failed.Add(n)
		if b.stopping.Load() {
			b.failedStopping.Store(true)
		}
		if !b.failing && b.log != nil {
			b.log.Warn("otlpexporter: exporting spans failed; failures are counted until an export succeeds",
				"spans", n, "error", err)
		}
		b.failing = true
		return batch[:0], err
	}
	b.exported.Add(n)
	if b.failing && b.log != nil {
		b.log.Info("otlpexporter: exporting spans works again")
	}
	b.failing = false
	return batch[:0], nil
}

// ForceFlush exports the spans queued when it is called and waits for that
// to finish or for ctx to end, whichever comes first. A flush that ctx
// abandons goes on in the background, bounded by the export timeout.
func (b *batcher) ForceFlush(ctx context.Context) error {
	if b.stopping.Load() {
		return nil
	}
	ack := make(chan struct{})
	select {
	case b.flush <- ack:
	case <-b.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-ack:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// shutdownMargin is the most Shutdown keeps back from its deadline to
// abort the export in flight, end the goroutine and close the exporter.
const shutdownMargin = 250 * time.Millisecond

// errAbandoned is wrapped by Shutdown's error when spans were abandoned at
// its deadline.
var errAbandoned = errors.New("otlpexporter: shutdown deadline reached; queued spans abandoned")

// Shutdown exports what is queued, stopping at the first failed export
// (the one in flight when it is called included), then shuts the exporter
// down. Its deadline is ctx's, or one export timeout from now if ctx has
// none: Shutdown aborts the export in flight and abandons the rest
// (counted as dropped) early enough to return by it; if ctx is cancelled,
// it does so at once. In every case the processor's goroutine has ended
// when Shutdown returns. Calls after the first return nil.
func (b *batcher) Shutdown(ctx context.Context) error {
	first := false
	b.stopOnce.Do(func() { first = true })
	if !first {
		return nil
	}
	b.stopping.Store(true)
	close(b.stop)

	if _, ok := ctx.Deadline(); !ok {
		// Without a deadline a collector that accepts and never answers
		// would hold Shutdown for an export timeout per batch.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, b.cfg.exportTimeout)
		defer cancel()
	}
	dl, _ := ctx.Deadline()
	left := time.Until(dl)
	t := time.NewTimer(left - min(left/4, shutdownMargin))
	defer t.Stop()
	var err error
	select {
	case <-b.done:
	case <-t.C:
		err = fmt.Errorf("%w: %w", errAbandoned, context.DeadlineExceeded)
	case <-ctx.Done():
		err = fmt.Errorf("%w: %w", errAbandoned, context.Cause(ctx))
	}
	// Cancelling the exports' context returns the export in flight at
	// once (both OTLP exporters honour it), and the loop then counts the
	// rest as dropped without exporting it, so this wait is short.
	b.abort()
	<-b.done
	if err == nil {
		err = b.stopErr
	}
	if e := b.exp.Shutdown(ctx); e != nil && err == nil {
		err = e
	}
	return err
}
