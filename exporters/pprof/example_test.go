package pprofexporter_test

import (
	"bytes"
	"fmt"
	"log"
	"net/http"

	pprofexporter "github.com/gcprobe/probe/exporters/pprof"
	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/google/pprof/profile"
)

type conn struct {
	fd int
	_  *int
}

func (c *conn) close() {}

// The profile of a watcher's ledger, written and read back.
func Example() {
	w, err := finalizerwatch.New()
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()
	c := &conn{fd: 3}
	w.SetFinalizer(c, (*conn).close)

	var buf bytes.Buffer
	if err := pprofexporter.Write(&buf, w); err != nil {
		log.Fatal(err)
	}
	p, err := profile.ParseData(buf.Bytes())
	if err != nil {
		log.Fatal(err)
	}
	// A sample's values are in the order of the sample types: read them
	// by name.
	value := func(s *profile.Sample, typ string) int64 {
		for i, st := range p.SampleType {
			if st.Type == typ {
				return s.Value[i]
			}
		}
		return -1
	}
	s := p.Sample[0]
	fmt.Println(s.Label["kind"], s.Location[0].Line[0].Function.Name)
	for _, typ := range []string{pprofexporter.SampleRegistered, pprofexporter.SampleOutstanding, pprofexporter.SampleSuspect, pprofexporter.SampleGrowth} {
		fmt.Printf("%s %d\n", typ, value(s, typ))
	}
	// Output:
	// [finalizer] github.com/gcprobe/probe/exporters/pprof_test.Example
	// registered 1
	// outstanding 1
	// suspect 0
	// growth 0
}

// Serving the profile where go tool pprof expects it.
func ExampleHandler() {
	mux := http.NewServeMux()
	mux.Handle("/debug/pprof/finalizers", pprofexporter.Handler(finalizerwatch.Default))
	// go tool pprof http://localhost:6060/debug/pprof/finalizers
	_ = http.ListenAndServe
	fmt.Println("mounted")
	// Output: mounted
}
