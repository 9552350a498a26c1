package promexporter

import (
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/gcprobe/probe/internal/testkit"
)

// blockFinalizer registers, through w, a finalizer that signals started
// and then blocks until release is closed.
func blockFinalizer(w interface{ SetFinalizer(any, any) }, started chan<- struct{}, release <-chan struct{}) {
	w.SetFinalizer(new(siteObj), func(*siteObj) { // marker: blocking-finalizer
		close(started)
		<-release
	})
}

// runningSeries returns the gcprobe_finalizer_running_seconds series.
func runningSeries(t *testing.T, reg *prometheus.Registry) []*dto.Metric {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == "gcprobe_finalizer_running_seconds" {
			return f.GetMetric()
		}
	}
	return nil
}

// TestRunningSeries: while a watched finalizer blocks, its site has a
// running series that grows; once it returns, the series is gone.
func TestRunningSeries(t *testing.T) {
	w := newWatcher(t)
	c, err := New(WithWatcher(w))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	if got := runningSeries(t, reg); len(got) != 0 {
		t.Fatalf("running series with nothing running: %v", got)
	}

	started, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock)
	blockFinalizer(w, started, release)
	testkit.AwaitGC(t, 10*time.Second, "the blocking finalizer to run", func() bool {
		select {
		case <-started:
			return true
		default:
			return false
		}
	})

	line := testkit.MarkerLine(t, "running_test.go", "blocking-finalizer")
	var first float64
	for range 2 {
		got := runningSeries(t, reg)
		if len(got) != 1 {
			t.Fatalf("%d running series, want 1", len(got))
		}
		l := labels(got[0])
		if l["kind"] != "finalizer" || !strings.HasSuffix(l["site"], "running_test.go:"+strconv.Itoa(line)) ||
			!strings.Contains(l["site"], "blockFinalizer") {
			t.Fatalf("running series labels %v, want the blocking finalizer's site", l)
		}
		v := got[0].GetGauge().GetValue()
		if v <= first {
			t.Fatalf("running for %v, then %v: not growing", first, v)
		}
		first = v
		time.Sleep(5 * time.Millisecond) // let it run measurably longer; not synchronisation
	}

	unblock()
	testkit.Poll(t, 10*time.Second, "the running series to go once the finalizer returned", func() bool { return len(runningSeries(t, reg)) == 0 })
}
