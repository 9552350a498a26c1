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
	"github.com/gcprobe/probe/memstats"
)

// Without WithLogger, detector events go to slog's default logger, at
// Warn; with it, to the logger given, and nothing to the default.
func TestDetectorEventsAreLogged(t *testing.T) {
	var def, own testkit.SyncBuffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&def, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })

	start := func(opts ...probe.Option) *probe.Probe {
		t.Helper()
		opts = append(opts, probe.WithRegisterer(prometheus.NewRegistry()), probe.WithWatcher(newWatcher(t)),
			probe.WithInterval(10*time.Millisecond),
			probe.WithSamplerOptions(memstats.WithForcedGC(0.001), memstats.WithCauseHysteresis(0, 0))) // one forced cycle fires it, at once
		p, err := probe.Start(opts...)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	const line = `level=WARN msg="gcprobe: detector firing" detector=forced_gc value=`

	p := start()
	testkit.AwaitGC(t, 10*time.Second, "forced_gc in slog's default logger", func() bool {
		return strings.Contains(def.String(), line)
	})
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}

	n := len(def.String())
	p = start(probe.WithLogger(slog.New(slog.NewTextHandler(&own, nil))))
	defer p.Stop()
	testkit.AwaitGC(t, 10*time.Second, "forced_gc in the given logger", func() bool {
		return strings.Contains(own.String(), line)
	})
	if got := def.String()[n:]; strings.Contains(got, "gcprobe") {
		t.Fatalf("the default logger got, with WithLogger given:\n%s", got)
	}
}

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
	line := testkit.MarkerLine(t, "logs_test.go", "grow-leak")
	var buf testkit.SyncBuffer
	w := newWatcher(t)
	p, err := probe.Start(probe.WithRegisterer(prometheus.NewRegistry()), probe.WithWatcher(w), probe.WithSuspectAge(0),
		probe.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	t.Cleanup(func() { grownMu.Lock(); grown = nil; grownMu.Unlock() })
	want := fmt.Sprintf("logs_test.go:%d", line)
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
