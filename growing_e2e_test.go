package probe_test

import (
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gcprobe/probe"
	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/internal/testkit"
)

type growObj struct{ _ [32]byte }

var (
	grownMu sync.Mutex
	grown   []*growObj
)

func growLeak(w *finalizerwatch.Watcher, n int) {
	grownMu.Lock()
	defer grownMu.Unlock()
	for range n {
		o := &growObj{}
		w.SetFinalizer(o, func(*growObj) {}) // marker: grow-leak
		grown = append(grown, o)
	}
}

// TestGrowingLogNamesPlantedLeak: a probe whose program leaks a little at
// one line every GC cycle logs, through its logger, one Warn line naming
// that line as growing, and no second one while it keeps growing.
func TestGrowingLogNamesPlantedLeak(t *testing.T) {
	line := testkit.MarkerLine(t, "growing_e2e_test.go", "grow-leak")
	var buf testkit.SyncBuffer
	w := newWatcher(t)
	p, err := probe.Start(probe.WithRegisterer(prometheus.NewRegistry()), probe.WithWatcher(w), probe.WithSuspectAge(0),
		probe.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	t.Cleanup(func() { grownMu.Lock(); grown = nil; grownMu.Unlock() })
	want := fmt.Sprintf("growing_e2e_test.go:%d", line)
	testkit.Poll(t, 60*time.Second, "a growing line naming the planted leak", func() bool {
		growLeak(w, 10)
		runtime.GC()
		return strings.Contains(buf.String(), "site growing")
	})
	for range 10 { // keep growing over more cycles: no second line
		growLeak(w, 10)
		runtime.GC()
	}
	p.Stop()
	out := buf.String()
	if n := strings.Count(out, "site growing"); n != 1 {
		t.Fatalf("%d growing lines, want 1:\n%s", n, out)
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "site growing") {
			if !strings.Contains(l, want) || !strings.Contains(l, "level=WARN") || !strings.Contains(l, "suspects over 4 cycles") {
				t.Fatalf("growing line %q does not name %s with its evidence", l, want)
			}
		}
	}
}
