package pprofexporter_test

import (
	"bytes"
	"fmt"
	"log"
	"net/http"
	"strings"

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
	var types []string
	for _, st := range p.SampleType {
		types = append(types, st.Type+"/"+st.Unit)
	}
	fmt.Println(strings.Join(types, " "))
	s := p.Sample[0]
	fmt.Println(s.Label["kind"], s.Value, s.Location[0].Line[0].Function.Name)
	// Output:
	// outstanding/count suspect/count registered/count growth/count
	// [finalizer] [1 0 1 0] github.com/gcprobe/probe/exporters/pprof_test.Example
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
