package otlpexporter_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gcprobe/probe"
	otlpexporter "github.com/gcprobe/probe/exporters/otlp"
	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/internal/ledgertest"
	"github.com/gcprobe/probe/internal/testkit"
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
	testkit.PollEvery(t, 30*time.Second, 50*time.Millisecond, "a span counted as failed or dropped without a collector", func() (bool, string) {
		if prov.Failed()+prov.Dropped() != lost {
			return true, ""
		}
		work() // the host keeps working: neither blocks
		return false, fmt.Sprintf("exported %d", prov.Exported())
	})
	before := ledgertest.Totals(w, finalizerwatch.KindFinalizer).Registered
	for range 20 {
		work()
	}
	if got := ledgertest.Totals(w, finalizerwatch.KindFinalizer).Registered; got != before+2000 {
		t.Fatalf("registered %d during the outage, want 2000", got-before)
	}

	col2, _ := startCollectorAt(t, bin, grpcAddr, httpAddr)
	// 90s: gRPC reconnects with backoff.
	testkit.PollEvery(t, 90*time.Second, 250*time.Millisecond, "a span at the restarted collector", func() (bool, string) {
		work()
		if _, ok := col2.findSpan(t, service, "gcprobe.leak_report"); ok {
			return true, ""
		}
		return false, fmt.Sprintf("exported %d, failed %d, dropped %d\n%s", prov.Exported(), prov.Failed(), prov.Dropped(), col2.output())
	})
	t.Logf("exported %d, failed %d, dropped %d", prov.Exported(), prov.Failed(), prov.Dropped())
}
