package probe_test

import (
	"fmt"
	"log"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gcprobe/probe"
	"github.com/gcprobe/probe/finalizerwatch"
)

func Example() {
	w, _ := finalizerwatch.New() // a ledger of its own; programs use finalizerwatch.Default
	p, err := probe.Start(probe.WithRegisterer(prometheus.NewRegistry()), probe.WithWatcher(w))
	if err != nil {
		log.Fatal(err)
	}
	defer p.Stop()

	w.SetFinalizer(new(int64), func(*int64) {})
	r := p.Report()
	fmt.Println(r.Finalizers.Registered, len(r.Top))
	// Output: 1 1
}

func ExampleWithListenAddr() {
	p, err := probe.Start(
		probe.WithRegisterer(prometheus.NewRegistry()),
		probe.WithListenAddr("127.0.0.1:0"), // a free loopback port
	)
	if err != nil {
		log.Fatal(err)
	}
	defer p.Stop()
	fmt.Println(p.Addr() != nil)
	// Output: true
}
