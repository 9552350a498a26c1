package probe_test

import (
	"fmt"
	"log"
	"net/http"

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

// The live page, mounted on a server of the program's own, behind whatever
// authentication guards its metrics: open /debug/gcprobe/.
func ExampleProbe_PageHandler() {
	p, err := probe.Start(probe.WithRegisterer(prometheus.NewRegistry()))
	if err != nil {
		log.Fatal(err)
	}
	defer p.Stop()
	mux := http.NewServeMux()
	mux.Handle(probe.PagePath, p.PageHandler())       // the page, its files and data.json
	mux.Handle(probe.ProfilePath, p.ProfileHandler()) // the profile the page links to
	fmt.Println(probe.PagePath + probe.PageDataPath)
	// Output: /debug/gcprobe/data.json
}
