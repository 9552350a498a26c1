package probe_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gcprobe/probe"
	promexporter "github.com/gcprobe/probe/exporters/prometheus"
	"github.com/gcprobe/probe/finalizertest"
	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/memstats"
	"github.com/gcprobe/probe/stackcapture"
	"github.com/gcprobe/probe/tracing"
)

// rootErr returns the error probe.New returns for opt, stopping the probe
// if New accepted it.
func rootErr(t *testing.T, opt probe.Option) error {
	t.Helper()
	p, err := probe.New(probe.WithRegisterer(prometheus.NewRegistry()), opt)
	if err != nil {
		if p != nil {
			t.Errorf("probe.New returned a probe with error %v", err)
		}
		return err
	}
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	return nil
}

// leafCheck is one leaf package's constructor applied to the leaf option a
// root option forwards to.
type leafCheck struct {
	name string
	err  func() error
}

// TestOptionLimitsAreTheLeafPackages checks that each root option that sets
// something a leaf package owns accepts exactly the values that package's
// option accepts, and rejects the others with that package's error: the
// limit is defined once, in the leaf.
func TestOptionLimitsAreTheLeafPackages(t *testing.T) {
	type row struct {
		name   string
		give   any
		wantOK bool
		root   probe.Option
		leaves []leafCheck
	}
	var rows []row

	for _, d := range []time.Duration{-time.Second, 0, 1, time.Microsecond, time.Millisecond, time.Second} {
		rows = append(rows, row{
			name: "WithInterval", give: d, wantOK: d > 0,
			root: probe.WithInterval(d),
			leaves: []leafCheck{{"memstats.WithInterval", func() error {
				_, err := memstats.New(memstats.WithInterval(d))
				return err
			}}},
		})
	}
	for _, k := range []int{-1, 0, 1, probe.DefaultTopK, 1000, 1001, 1 << 20} {
		rows = append(rows, row{
			name: "WithTopK", give: k, wantOK: k >= 1,
			root: probe.WithTopK(k),
			leaves: []leafCheck{
				{"promexporter.WithTopK", func() error {
					_, err := promexporter.New(promexporter.WithTopK(k))
					return err
				}},
				{"tracing.WithTopK", func() error {
					_, err := tracing.New(tracing.WithTopK(k))
					return err
				}},
			},
		})
	}
	for _, d := range []time.Duration{-time.Millisecond, -1, 0, 1, tracing.DefaultPauseThreshold} {
		rows = append(rows, row{
			name: "WithPauseThreshold", give: d, wantOK: d >= 0,
			root: probe.WithPauseThreshold(d),
			leaves: []leafCheck{{"tracing.WithPauseThreshold", func() error {
				_, err := tracing.New(tracing.WithPauseThreshold(d))
				return err
			}}},
		})
	}
	for _, d := range []time.Duration{-time.Second, 0, 1, 999 * time.Millisecond, time.Second, time.Hour} {
		rows = append(rows, row{
			name: "WithLeakReportInterval", give: d, wantOK: d > 0,
			root: probe.WithLeakReportInterval(d),
			leaves: []leafCheck{{"tracing.WithLeakReportInterval", func() error {
				_, err := tracing.New(tracing.WithLeakReportInterval(d))
				return err
			}}},
		})
	}
	rows = append(rows, row{
		name: "WithTracerProvider", give: "nil", wantOK: false,
		root: probe.WithTracerProvider(nil),
		leaves: []leafCheck{{"tracing.WithTracerProvider", func() error {
			_, err := tracing.New(tracing.WithTracerProvider(nil))
			return err
		}}},
	})

	for _, tt := range rows {
		t.Run(fmt.Sprintf("%s(%v)", tt.name, tt.give), func(t *testing.T) {
			rerr := rootErr(t, tt.root)
			if (rerr == nil) != tt.wantOK {
				t.Errorf("probe.%s(%v): error %v, want accepted=%v", tt.name, tt.give, rerr, tt.wantOK)
			}
			for _, leaf := range tt.leaves {
				lerr := leaf.err()
				if (lerr == nil) != tt.wantOK {
					t.Errorf("%s(%v): error %v, want accepted=%v", leaf.name, tt.give, lerr, tt.wantOK)
				}
				// The root's error is the first leaf's, prefixed: no
				// message, and no limit, of its own.
				if rerr != nil && lerr != nil && leaf.name == tt.leaves[0].name && rerr.Error() != "probe: "+lerr.Error() {
					t.Errorf("probe.%s(%v): error %q, want %q", tt.name, tt.give, rerr, "probe: "+lerr.Error())
				}
			}
		})
	}
}

// TestNilOptionIsAnErrorEverywhere checks that every constructor of the
// root module that takes options rejects a nil Option with an error naming
// the package and the constructor. The nested modules' constructors
// (k8sfinalizers.New, reconciletrace.Wrap, otlpexporter.NewTracerProvider)
// are checked by their own option tests.
func TestNilOptionIsAnErrorEverywhere(t *testing.T) {
	tests := []struct {
		name string
		give func() error
		want string
	}{
		{"probe.New", func() error { _, err := probe.New(nil); return err }, "probe: New: nil Option"},
		{"probe.Start", func() error { _, err := probe.Start(nil); return err }, "probe: New: nil Option"},
		{"finalizerwatch.New", func() error { _, err := finalizerwatch.New(nil); return err }, "finalizerwatch: New: nil Option"},
		{"stackcapture.NewTable", func() error { _, err := stackcapture.NewTable(nil); return err }, "stackcapture: NewTable: nil Option"},
		{"memstats.New", func() error { _, err := memstats.New(nil); return err }, "memstats: New: nil Option"},
		{"promexporter.New", func() error { _, err := promexporter.New(nil); return err }, "promexporter: New: nil Option"},
		{"tracing.New", func() error { _, err := tracing.New(nil); return err }, "tracing: New: nil Option"},
		{"finalizertest.Find", func() error { return finalizertest.Find(nil) }, "finalizertest: Find: nil Option"},
		{"probe.WithSamplerOptions", func() error {
			_, err := probe.New(probe.WithSamplerOptions(nil))
			return err
		}, "probe: memstats: New: nil Option"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.give(); err == nil || err.Error() != tt.want {
				t.Errorf("error %v, want %q", err, tt.want)
			}
		})
	}
}
