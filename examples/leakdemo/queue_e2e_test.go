package main

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gcprobe/probe/internal/testkit"
)

// tables splits the demo's output into the tables it printed, oldest first.
func tables(out string) []string {
	idx := regexp.MustCompile(`(?m)^gcprobe \d\d:\d\d:\d\d `).FindAllStringIndex(out, -1)
	var ts []string
	for i, m := range idx {
		end := len(out)
		if i+1 < len(idx) {
			end = idx[i+1][0]
		}
		ts = append(ts, out[m[0]:end])
	}
	return ts
}

// testPacer holds each phase of the demo's queue trouble open until the
// test has seen it (issue 26, item 14: on a loaded machine the timed demo's
// windows closed before the test looked): the slow burst's backlog is
// kept up until the test lets it drain, and the blocker blocks until the
// test releases it. After one round the queue trouble waits for the end.
type testPacer struct {
	drain   chan struct{} // closed: the backlog may drain, the blocker comes
	release chan struct{} // closed: the blocker lets go
}

func newTestPacer() *testPacer {
	return &testPacer{drain: make(chan struct{}), release: make(chan struct{})}
}

func (p *testPacer) keepBacklog(ctx context.Context, top func()) bool {
	// The slow finalizers drain 250 a second: looked at every 100 ms,
	// the backlog stays between 2 and 3 s of work (topUpBacklog).
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-p.drain:
			return true
		case <-ctx.Done():
			return false
		case <-tick.C:
			top()
		}
	}
}

func (p *testPacer) beforeBlock(ctx context.Context) bool { return ctx.Err() == nil }

func (p *testPacer) hold(ctx context.Context) {
	select {
	case <-p.release:
	case <-ctx.Done():
	}
}

func (p *testPacer) afterBlock(ctx context.Context) bool {
	<-ctx.Done()
	return false
}

// TestDemoQueue runs the demo and checks its finalizer-queue part does what
// queue.go and the README say: after the slow burst the table shows
// "firing: ... queue_latency"; the blocking finalizer is named, by its line
// in queue.go, as finalizer_blocked and in a "running now:" line, and in
// /metrics; released, it clears.
//
// The test sets the pace: each phase lasts until the test has seen it, so a
// loaded machine makes the test slower, not wrong. The deadlines only bound
// a failure.
func TestDemoQueue(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo for about 20s")
	}
	pace := newTestPacer()
	base, out := startPacedDemo(t, 10, pace)
	start := time.Now()
	line := strconv.Itoa(testkit.MarkerLine(t, "queue.go", "blocking-finalizer"))
	// As the table prints the site: the function is main.blockOnce under
	// go run, the package's import path in a test binary.
	runningNow := regexp.MustCompile(`(?m)^running now: \S*\.blockOnce queue\.go:` + line + ` \(finalizer\) for `)
	named := regexp.MustCompile(`finalizer_blocked \([^)]*, finalizer \S*\.blockOnce \S*/queue\.go:` + line + `\)`)
	site := "blockOnce queue.go:" + line

	wait := func(within time.Duration, what string, cond func([]string) bool) {
		t.Helper()
		testkit.PollEvery(t, within, 50*time.Millisecond, what, func() (bool, string) {
			printed := out.String()
			return cond(tables(printed)), printed
		})
		t.Logf("%s after %v", what, time.Since(start).Round(100*time.Millisecond))
	}
	firing := func(tb, detector string) bool {
		for _, l := range strings.Split(tb, "\n") {
			if strings.HasPrefix(l, "firing:") && strings.Contains(l, " "+detector+" (") {
				return true
			}
		}
		return false
	}

	// The burst is queued as the demo starts, and its backlog kept up
	// until the table has shown queue_latency firing.
	wait(60*time.Second, "queue_latency firing after the slow burst", func(ts []string) bool {
		for _, tb := range ts {
			if firing(tb, "queue_latency") {
				return true
			}
		}
		return false
	})
	close(pace.drain)

	// The blocker runs once the backlog has drained, and blocks until
	// released: /metrics must show it running for over a second with
	// finalizer_blocked firing, and a table must name it.
	running := regexp.MustCompile(`(?m)^gcprobe_finalizer_running_seconds\{kind="finalizer",site="\S*\.blockOnce \S*/queue\.go:` + line + `"\} ([0-9.e+]+)$`)
	var metrics string
	testkit.PollEvery(t, 90*time.Second, 50*time.Millisecond, "/metrics to show the blocker running over 1s with finalizer_blocked firing", func() (bool, string) {
		metrics = string(get(t, base+"/metrics"))
		m := running.FindStringSubmatch(metrics)
		if m != nil && strings.Contains(metrics, `gcprobe_detector_firing{detector="finalizer_blocked"} 1`) {
			if v, _ := strconv.ParseFloat(m[1], 64); v >= 1 {
				t.Logf("/metrics: blocker running for %ss, finalizer_blocked firing, after %v", m[1], time.Since(start).Round(100*time.Millisecond))
				return true, ""
			}
		}
		return false, linesWith(metrics, "running_seconds") + linesWith(metrics, "detector_firing")
	})
	var blockedAt int
	wait(60*time.Second, "finalizer_blocked naming "+site, func(ts []string) bool {
		for i, tb := range ts {
			if firing(tb, "finalizer_blocked") && runningNow.MatchString(tb) && named.MatchString(tb) {
				blockedAt = i
				return true
			}
		}
		return false
	})
	close(pace.release)

	wait(60*time.Second, "finalizer_blocked clearing once released", func(ts []string) bool {
		return len(ts) > blockedAt+1 && !firing(ts[len(ts)-1], "finalizer_blocked") &&
			!runningNow.MatchString(ts[len(ts)-1])
	})
}

func linesWith(s, substr string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}
