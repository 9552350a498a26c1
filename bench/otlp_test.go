package bench

import (
	"context"
	"net"
	"sync"
	"sync/atomic"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
)

// otlpReceiver is an in-process OTLP/gRPC trace receiver on loopback: it
// counts the spans it is sent and drops them, standing in for a collector
// so that the full-feature run pays for encoding and sending its spans.
type otlpReceiver struct {
	collectortrace.UnimplementedTraceServiceServer

	srv     *grpc.Server
	ln      net.Listener
	wg      sync.WaitGroup
	spans   atomic.Int64
	exports atomic.Int64
}

func startOTLPReceiver() (*otlpReceiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &otlpReceiver{srv: grpc.NewServer(), ln: ln}
	collectortrace.RegisterTraceServiceServer(r.srv, r)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		_ = r.srv.Serve(ln) // returns when stopped
	}()
	return r, nil
}

// Export implements the OTLP trace service.
func (r *otlpReceiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	var n int64
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			n += int64(len(ss.GetSpans()))
		}
	}
	r.spans.Add(n)
	r.exports.Add(1)
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// Addr is the receiver's host:port.
func (r *otlpReceiver) Addr() string { return r.ln.Addr().String() }

// Stop stops the server and waits for it.
func (r *otlpReceiver) Stop() {
	r.srv.Stop()
	r.wg.Wait()
}
