package otlpexporter_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gcprobe/probe"
	otlpexporter "github.com/gcprobe/probe/exporters/otlp"
	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/internal/ledgertest"
)

// The collector is killed while the probe runs and restarted on the same
// port: the host keeps registering and reporting, the spans of the outage
// are counted as failed or dropped, and once the collector is back the
// probe's spans reach it again.
func TestCollectorKilledAndRestarted(t *testing.T) {
	bin := os.Getenv("GCPROBE_OTELCOL")
	if bin == "" {
		t.Skip("GCPROBE_OTELCOL not set: run `source scripts/testenv.sh` (it builds the OpenTelemetry Collector)")
	}
	grpcAddr, httpAddr := freeAddr(t), freeAddr(t)
	col, kill := startCollectorAt(t, bin, grpcAddr, httpAddr)
	const service = "gcprobe-restart"
	setEnv(t, map[string]string{
		"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + grpcAddr,
		"OTEL_SERVICE_NAME":           service,
	})
	prov, err := otlpexporter.NewTracerProvider(context.Background(),
		otlpexporter.WithBatchTimeout(100*time.Millisecond),
		otlpexporter.WithExportTimeout(time.Second),
		otlpexporter.WithMaxQueueSize(64))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		prov.Shutdown(ctx)
	}()
	w, err := finalizerwatch.New()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	p, err := probe.Start(probe.WithRegisterer(prometheus.NewRegistry()), probe.WithWatcher(w), probe.WithTracerProvider(prov))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	type obj struct {
		p   *int
		buf [32]byte
	}
	work := func() {
		for range 100 {
			w.SetFinalizer(&obj{}, func(*obj) {})
		}
		p.ReportNow(context.Background())
	}

	work()
	col.awaitSpan(t, service, "gcprobe.leak_report")

	kill()
	lost := prov.Failed() + prov.Dropped()
	deadline := time.Now().Add(30 * time.Second)
	for prov.Failed()+prov.Dropped() == lost {
		if time.Now().After(deadline) {
			t.Fatalf("no span counted as failed or dropped in 30s without a collector (exported %d)", prov.Exported())
		}
		work() // the host keeps working: neither blocks
		time.Sleep(50 * time.Millisecond)
	}
	before := ledgertest.Totals(w, finalizerwatch.KindFinalizer).Registered
	for range 20 {
		work()
	}
	if got := ledgertest.Totals(w, finalizerwatch.KindFinalizer).Registered; got != before+2000 {
		t.Fatalf("registered %d during the outage, want 2000", got-before)
	}

	col2, _ := startCollectorAt(t, bin, grpcAddr, httpAddr)
	deadline = time.Now().Add(90 * time.Second) // gRPC reconnects with backoff
	for {
		work()
		if _, ok := col2.findSpan(t, service, "gcprobe.leak_report"); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no span reached the restarted collector in 90s (exported %d, failed %d, dropped %d)\n%s",
				prov.Exported(), prov.Failed(), prov.Dropped(), col2.output())
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("exported %d, failed %d, dropped %d", prov.Exported(), prov.Failed(), prov.Dropped())
}
