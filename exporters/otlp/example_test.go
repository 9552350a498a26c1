package otlpexporter_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	otlpexporter "github.com/gcprobe/probe/exporters/otlp"
	"github.com/gcprobe/probe/tracing"
)

// A provider from the environment, handed to the tracing reporter. The
// collector here is not running: the program neither blocks nor fails,
// and Shutdown returns by its deadline.
func ExampleNewTracerProvider() {
	os.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	os.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1") // nothing listens there
	os.Setenv("OTEL_SERVICE_NAME", "leaky-daemon")
	defer os.Unsetenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	defer os.Unsetenv("OTEL_EXPORTER_OTLP_ENDPOINT")
	defer os.Unsetenv("OTEL_SERVICE_NAME")

	tp, err := otlpexporter.NewTracerProvider(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	r, err := tracing.New(tracing.WithTracerProvider(tp))
	if err != nil {
		log.Fatal(err)
	}
	r.ReportNow(context.Background())

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err = tp.Shutdown(ctx) // about 750ms: the export is aborted in time
	fmt.Println("protocol:", tp.Protocol())
	fmt.Println("exported:", tp.Exported(), "lost:", tp.Failed()+tp.Dropped())
	fmt.Println("shutdown error:", err != nil)
	// Output:
	// protocol: grpc
	// exported: 0 lost: 1
	// shutdown error: true
}
