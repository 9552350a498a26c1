package tracing_test

import (
	"context"
	"fmt"
	"log"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/memstats"
	"github.com/gcprobe/probe/stackcapture"
	"github.com/gcprobe/probe/tracing"
)

// A reporter on a recording tracer provider: one leak report on demand.
// In a program, the provider comes from exporters/otlp (or the global one),
// and Start emits a report every interval.
func Example() {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())

	w, err := finalizerwatch.New()
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()
	r, err := tracing.New(tracing.WithTracerProvider(tp), tracing.WithWatcher(w))
	if err != nil {
		log.Fatal(err)
	}
	if err := r.Start(); err != nil {
		log.Fatal(err)
	}
	defer r.Stop()

	r.ReportNow(context.Background())
	for _, s := range rec.Ended() {
		fmt.Println(s.Name(), "with", len(s.Events()), "sites")
	}
	// Output:
	// gcprobe.leak_report with 0 sites
}

// Pauses come from the sampler by default; a PauseSource can feed them
// instead. This one holds a single 25ms pause.
func ExampleReporter_ReportPauses() {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())

	end := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	src := func(since uint64, dst []memstats.Pause) []memstats.Pause {
		if since < 42 {
			dst = append(dst, memstats.Pause{Cycle: 42, End: end, Duration: 25 * time.Millisecond})
		}
		return dst
	}
	r, err := tracing.New(tracing.WithTracerProvider(tp), tracing.WithPauseSource(src))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("reported:", r.ReportPauses(context.Background()))
	fmt.Println("again:", r.ReportPauses(context.Background()))
	s := rec.Ended()[0]
	fmt.Println(s.Name(), s.EndTime().Sub(s.StartTime()))
	for _, a := range s.Attributes() {
		fmt.Println(a.Key, a.Value.Emit())
	}
	// Output:
	// reported: 1
	// again: 0
	// gcprobe.gc_pause 25ms
	// gcprobe.gc.cycle 42
	// gcprobe.gc.pause_ns 25000000
}

func ExampleFormatStack() {
	fmt.Print(tracing.FormatStack([]stackcapture.Frame{
		{Function: "main.openFile", File: "/src/app/main.go", Line: 21},
		{Function: "main.main", File: "/src/app/main.go", Line: 9},
	}))
	// Output:
	// main.openFile
	// 	/src/app/main.go:21
	// main.main
	// 	/src/app/main.go:9
}
