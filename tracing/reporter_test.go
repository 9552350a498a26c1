package tracing

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/gcprobe/probe/internal/lifecycle"
	"github.com/gcprobe/probe/internal/lifecycle/lifecycletest"
	"github.com/gcprobe/probe/memstats"
)

func TestLifecycle(t *testing.T) {
	r := newReporter(t, WithTracerProvider(noopProvider()), WithWatcher(newWatcher(t)))
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	if err := r.Start(); !errors.Is(err, ErrRunning) {
		t.Errorf("second Start: %v, want ErrRunning", err)
	}
	if err := r.Run(t.Context()); !errors.Is(err, ErrRunning) {
		t.Errorf("Run while started: %v, want ErrRunning", err)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(r.Stop)
	}
	wg.Wait()
	r.Stop()
	if err := r.Start(); !errors.Is(err, ErrStopped) {
		t.Errorf("Start after Stop: %v, want ErrStopped", err)
	}
	if err := r.Run(t.Context()); !errors.Is(err, ErrStopped) {
		t.Errorf("Run after Stop: %v, want ErrStopped", err)
	}
}

func TestStopBeforeStart(t *testing.T) {
	r := newReporter(t, WithTracerProvider(noopProvider()))
	r.Stop()
	if err := r.Start(); !errors.Is(err, ErrStopped) {
		t.Errorf("Start after Stop: %v, want ErrStopped", err)
	}
}

func TestRunEndsWithContext(t *testing.T) {
	r := newReporter(t, WithTracerProvider(noopProvider()), WithWatcher(newWatcher(t)))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return 10s after its context ended")
	}
}

func TestRunEndsWithStop(t *testing.T) {
	r := newReporter(t, WithTracerProvider(noopProvider()), WithWatcher(newWatcher(t)))
	done := make(chan error, 1)
	go func() { done <- r.Run(context.Background()) }()
	// Stop may win the race with Run's start; then Run reports
	// ErrStopped, which is fine too.
	r.Stop()
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, ErrStopped) {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return 10s after Stop")
	}
}

// The running reporter emits a leak report every interval and polls the
// pause source every pause interval; fake time (synctest) runs a few
// minutes in an instant. Stop flushes the pauses seen by then.
func TestLoopSchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tp, rec := newRecorder(t)
		src := &fakePauses{}
		r, err := New(WithTracerProvider(tp), WithWatcher(newWatcher(t)), WithPauseSource(src.since),
			WithLeakReportInterval(time.Minute), WithPausePollInterval(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3*time.Minute + time.Second)
		synctest.Wait()
		if got := len(spansNamed(rec, "gcprobe.leak_report")); got != 3 {
			t.Errorf("%d leak reports in 3 minutes, want 3", got)
		}
		src.mu.Lock()
		calls := src.calls
		src.mu.Unlock()
		if calls != 18 {
			t.Errorf("pause source polled %d times in 3 minutes, want 18", calls)
		}
		src.add(memstats.Pause{Cycle: 1, End: time.Now(), Duration: time.Second})
		r.Stop()
		if got := len(spansNamed(rec, "gcprobe.gc_pause")); got != 1 {
			t.Errorf("%d pause spans after Stop, want 1 (flushed)", got)
		}
	})
}

// The lifecycle matrix: every order of Start, Run and Stop, and all of
// them from many goroutines at once, answer as package lifecycle says and
// leave no goroutine behind.
func TestLifecycleMatrix(t *testing.T) {
	w := newWatcher(t)
	subject := func(t *testing.T) lifecycletest.Subject {
		r := newReporter(t, WithTracerProvider(noopProvider()), WithWatcher(w))
		return lifecycletest.Subject{
			Start: r.Start,
			Run:   r.Run,
			Stop:  func() error { r.Stop(); return nil },
			State: r.life.State,
		}
	}
	ignore := goleak.IgnoreAnyFunction("runtime.runCleanups")
	t.Run("sequences", func(t *testing.T) { lifecycletest.Matrix(t, subject, lifecycle.Idle, ignore) })
	t.Run("concurrent", func(t *testing.T) { lifecycletest.Concurrent(t, subject, 20, 9, ignore) })
}

// A Run ended by its context leaves the reporter stopped, as Stop does.
func TestRunEndedByContextStops(t *testing.T) {
	r := newReporter(t, WithTracerProvider(noopProvider()), WithWatcher(newWatcher(t)))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := r.Run(ctx); err != nil {
		t.Fatalf("Run: %v", err)
	}
	err := r.Start()
	if !errors.Is(err, ErrStopped) || !strings.Contains(err.Error(), "tracing: Reporter.Start") {
		t.Fatalf("Start after Run ended: %v, want ErrStopped naming tracing: Reporter.Start", err)
	}
}
