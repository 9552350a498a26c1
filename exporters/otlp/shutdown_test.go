package otlpexporter_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	otlpexporter "github.com/gcprobe/probe/exporters/otlp"
)

// silentCollector listens on loopback, accepts connections, reads whatever
// they send and never answers: a collector that hangs. got is closed once
// some bytes arrived (an export is in flight). Everything is closed when
// the test ends.
func silentCollector(t *testing.T) (addr string, got <-chan struct{}) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	arrived := make(chan struct{})
	var (
		once  sync.Once
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Go(func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				buf := make([]byte, 4096)
				for {
					if _, err := c.Read(buf); err != nil {
						return
					}
					once.Do(func() { close(arrived) })
				}
			})
		}
	})
	t.Cleanup(func() {
		lis.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return lis.Addr().String(), arrived
}

// Issue 12, item 10: against a collector that accepts and never answers,
// Shutdown(context.Background()) took 59 s over HTTP and 19 s over gRPC:
// the export in flight ran to its timeout, then the drain tried again.
// Now Shutdown stops at the first failed export, the one in flight
// included, and without a deadline gives itself one export timeout: it
// returns within the export timeout, having tried one batch. With a
// context that is cancelled, it returns at once.
func TestShutdownAgainstSilentCollector(t *testing.T) {
	const (
		exportTimeout = 3 * time.Second
		batch         = 4
		// Slack for a loaded machine; the old behaviour took two export
		// timeouts.
		slack = 1500 * time.Millisecond
	)
	for _, protocol := range []string{otlpexporter.ProtocolGRPC, otlpexporter.ProtocolHTTPProtobuf} {
		for _, tc := range []struct {
			name string
			// inFlight: a batch is being exported when Shutdown is
			// called; otherwise everything is still queued.
			inFlight bool
			// cancelAfter: Shutdown's context is cancelled this long
			// after the call; timeout: it has this deadline; neither
			// means context.Background().
			cancelAfter, timeout time.Duration
			within               time.Duration
			wantFailed           uint64 // spans in the one export tried
		}{
			{"export in flight", true, 0, 0, exportTimeout + slack, batch},
			{"all queued", false, 0, 0, exportTimeout + slack, batch},
			// A deadline far off: the failure of the export in flight
			// ends the shutdown, not the deadline.
			{"export in flight, long deadline", true, 0, 4 * exportTimeout, exportTimeout + slack, batch},
			{"all queued, long deadline", false, 0, 4 * exportTimeout, exportTimeout + slack, batch},
			{"context cancelled", true, 100 * time.Millisecond, 0, 100*time.Millisecond + slack, batch},
		} {
			t.Run(protocol+"/"+tc.name, func(t *testing.T) {
				addr, arrived := silentCollector(t)
				setEnv(t, map[string]string{
					"OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
					"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + addr,
				})
				delay := time.Hour // nothing leaves the queue until a batch is full or Shutdown
				p := newProvider(t, otlpexporter.WithExportTimeout(exportTimeout),
					otlpexporter.WithMaxExportBatchSize(batch), otlpexporter.WithBatchTimeout(delay))
				tr := p.Tracer("test")
				end := func(n int) {
					for range n {
						_, s := tr.Start(context.Background(), "gcprobe.test")
						s.End()
					}
				}
				const total = 3 * batch
				if tc.inFlight {
					end(batch) // a full batch: exported at once
					select {
					case <-arrived:
					case <-time.After(10 * time.Second):
						t.Fatal("the export did not reach the collector within 10s")
					}
					end(total - batch)
				} else {
					end(total)
				}

				ctx := context.Background()
				if tc.timeout > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tc.timeout)
					defer cancel()
				}
				if tc.cancelAfter > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithCancel(ctx)
					time.AfterFunc(tc.cancelAfter, cancel)
					defer cancel()
				}
				start := time.Now()
				err := p.Shutdown(ctx)
				took := time.Since(start)
				t.Logf("Shutdown took %v: %v (exported %d, failed %d, dropped %d)",
					took.Round(time.Millisecond), err, p.Exported(), p.Failed(), p.Dropped())
				if took > tc.within {
					t.Errorf("Shutdown took %v, want at most %v", took, tc.within)
				}
				if err == nil {
					t.Error("Shutdown reported no error although nothing was exported")
				}
				if tc.cancelAfter > 0 && !errors.Is(err, context.Canceled) {
					t.Errorf("Shutdown with a cancelled context = %v, want it to wrap context.Canceled", err)
				}
				if tc.timeout > 0 && err != nil && !strings.Contains(err.Error(), "abandoned after a failed export") {
					t.Errorf("Shutdown = %v, want the failed export's error, not its deadline's", err)
				}
				if p.Exported() != 0 || p.Failed()+p.Dropped() != total {
					t.Errorf("exported %d failed %d dropped %d, want 0 and %d lost", p.Exported(), p.Failed(), p.Dropped(), total)
				}
				// Stop at the first failure: one batch tried, the rest
				// never sent. (A cancelled Shutdown aborts the export in
				// flight, which counts as failed too.)
				if p.Failed() > tc.wantFailed {
					t.Errorf("failed %d: more than the one batch (%d spans) was tried", p.Failed(), tc.wantFailed)
				}
			})
		}
	}
}
