package reconciletrace

import (
	"errors"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/gcprobe/probe/heapprofile"
)

// DefaultSpanName is the name of the span a wrapped reconciler starts
// unless WithSpanName says otherwise.
const DefaultSpanName = "reconcile"

// ScopeName is the instrumentation scope of the wrapper's tracer.
const ScopeName = "github.com/gcprobe/probe/tracing/reconciletrace"

// Option configures a wrapped reconciler. An Option rejects a bad value
// with an error, which Wrap and WrapTyped return.
type Option func(*config) error

type config struct {
	provider   trace.TracerProvider
	spanName   string
	controller string
	newSpan    bool
	heap       func() heapprofile.Snapshot // WithHeapProfile (allocsites.go)
	causes     func() []string             // WithCauses (allocsites.go)
}

func defaultConfig() config {
	return config{spanName: DefaultSpanName}
}

func (c *config) apply(opts []Option) error {
	for _, o := range opts {
		if o == nil {
			return errors.New("reconciletrace: Wrap: nil Option")
		}
		if err := o(c); err != nil {
			return err
		}
	}
	if c.provider == nil {
		c.provider = otel.GetTracerProvider()
	}
	return nil
}

// WithTracerProvider sets the provider the wrapper's tracer comes from
// (default otel.GetTracerProvider() at the time of Wrap). tp must not be
// nil.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) error {
		if tp == nil {
			return errors.New("reconciletrace: WithTracerProvider: nil TracerProvider")
		}
		c.provider = tp
		return nil
	}
}

// WithSpanName sets the name of the spans the wrapper starts (default
// DefaultSpanName). name must not be empty.
func WithSpanName(name string) Option {
	return func(c *config) error {
		if name == "" {
			return errors.New("reconciletrace: WithSpanName: empty name")
		}
		c.spanName = name
		return nil
	}
}

// WithControllerName records name as the gcprobe.controller.name attribute
// of every reconcile, to tell controllers apart. name must not be empty.
func WithControllerName(name string) Option {
	return func(c *config) error {
		if name == "" {
			return errors.New("reconciletrace: WithControllerName: empty name")
		}
		c.controller = name
		return nil
	}
}

// WithNewSpan makes the wrapper start a span of its own for every
// reconcile, as a child of any span in the context, instead of enriching a
// recording span it finds there.
func WithNewSpan() Option {
	return func(c *config) error {
		c.newSpan = true
		return nil
	}
}
