package promexporter_test

import (
	"fmt"
	"log"
	"strings"

	promexporter "github.com/gcprobe/probe/exporters/prometheus"
	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/memstats"
	"github.com/prometheus/client_golang/prometheus"
)

type file struct {
	fd int
	_  *int
}

func (f *file) close() {}

// A collector of a watcher's ledger, registered and scraped.
func Example() {
	w, err := finalizerwatch.New()
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()
	var files []*file
	for fd := range 3 {
		f := &file{fd: fd}
		w.SetFinalizer(f, (*file).close)
		files = append(files, f)
	}

	c, err := promexporter.New(promexporter.WithWatcher(w), promexporter.WithTopK(5))
	if err != nil {
		log.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(c); err != nil {
		log.Fatal(err)
	}
	// A second collector on the same registry is refused, not a panic.
	if err := reg.Register(c); err != nil {
		fmt.Println("second:", err)
	}

	fams, err := reg.Gather()
	if err != nil {
		log.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "gcprobe_finalizers_registered_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "site" {
					// The site is "function file:line"; keep the function.
					fmt.Println(strings.Fields(l.GetValue())[0], m.GetCounter().GetValue())
				}
			}
		}
	}
	_ = files
	// Output:
	// second: duplicate metrics collector registration attempted
	// github.com/gcprobe/probe/exporters/prometheus_test.Example 3
}

// The runtime-level series come from a memstats.Sampler.
func ExampleWithSampler() {
	s, err := memstats.New()
	if err != nil {
		log.Fatal(err)
	}
	if err := s.Start(); err != nil {
		log.Fatal(err)
	}
	defer s.Stop()

	c, err := promexporter.New(promexporter.WithSampler(s))
	if err != nil {
		log.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(c); err != nil {
		log.Fatal(err)
	}
	fams, err := reg.Gather()
	if err != nil {
		log.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == "gcprobe_detector_firing" {
			fmt.Println(f.GetName(), len(f.GetMetric()), "detectors")
		}
	}
	// Output:
	// gcprobe_detector_firing 10 detectors
}
