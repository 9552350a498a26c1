package lifecycle

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// ticker is a minimal long-lived type built on a Lifecycle, the way
// memstats.Sampler and tracing.Reporter use it: one goroutine that runs
// until Stop.
type ticker struct {
	life          Lifecycle
	starts, stops atomic.Int32
}

func (k *ticker) start() error {
	k.starts.Add(1)
	done := k.life.Done()
	k.life.Go(func() { <-done })
	return nil
}

func (k *ticker) stop() error { k.stops.Add(1); return nil }

func (k *ticker) Start() error { return k.life.Start(k.start, k.stop) }
func (k *ticker) Run(ctx context.Context) error {
	return k.life.Run(ctx, k.start, func(ctx context.Context) { <-ctx.Done() }, k.stop)
}
func (k *ticker) Stop() error { return k.life.Stop(k.stop) }

// Every order of Start, Run and Stop: the errors each call returns, and
// that the start and stop hooks ran exactly once when anything started.
func TestTransitions(t *testing.T) {
	type step struct {
		op   string // "start", "run" (ended by its context), "stop"
		want error  // nil, ErrRunning or ErrStopped
	}
	tests := []struct {
		name string
		give []step
		// started: whether the hooks ran (once each).
		started bool
	}{
		{"stop only", []step{{"stop", nil}, {"stop", nil}}, false},
		{"start stop", []step{{"start", nil}, {"stop", nil}}, true},
		{"start start stop", []step{{"start", nil}, {"start", ErrRunning}, {"run", ErrRunning}, {"stop", nil}}, true},
		{"start stop start", []step{{"start", nil}, {"stop", nil}, {"start", ErrStopped}, {"run", ErrStopped}}, true},
		{"stop start", []step{{"stop", nil}, {"start", ErrStopped}, {"run", ErrStopped}}, false},
		{"run ends, then start", []step{{"run", nil}, {"start", ErrStopped}, {"stop", nil}}, true},
		{"run run", []step{{"run", nil}, {"run", ErrStopped}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := &ticker{life: Lifecycle{Name: "test: Ticker"}}
			for i, s := range tt.give {
				var err error
				switch s.op {
				case "start":
					err = k.Start()
				case "run":
					ctx, cancel := context.WithCancel(context.Background())
					cancel()
					err = k.Run(ctx)
				case "stop":
					err = k.Stop()
				}
				if !errors.Is(err, s.want) || (s.want == nil && err != nil) {
					t.Fatalf("step %d (%s): %v, want %v", i, s.op, err, s.want)
				}
				if err != nil && !strings.HasPrefix(err.Error(), "test: Ticker.") {
					t.Errorf("step %d: error %q does not name the type and method", i, err)
				}
			}
			want := int32(0)
			if tt.started {
				want = 1
			}
			if k.starts.Load() != want || k.stops.Load() != want {
				t.Errorf("start hook ran %d times, stop hook %d, want %d", k.starts.Load(), k.stops.Load(), want)
			}
		})
	}
}

// A Start whose hook fails leaves the value stopped, after its undo and
// after the goroutines it had started have ended.
func TestStartFailure(t *testing.T) {
	var l Lifecycle
	l.Name = "test: T"
	ended := make(chan struct{})
	undone := false
	boom := errors.New("boom")
	err := l.Start(func() error {
		done := l.Done()
		l.Go(func() { <-done; close(ended) })
		return boom
	}, func() error { undone = true; return nil })
	if !errors.Is(err, boom) {
		t.Fatalf("Start = %v, want boom", err)
	}
	select {
	case <-ended:
	default:
		t.Fatal("Start returned before the goroutine its hook started had ended")
	}
	if !undone || l.State() != Stopped {
		t.Fatalf("undo ran: %v; state %v, want stopped", undone, l.State())
	}
	if err := l.Start(nil, nil); !errors.Is(err, ErrStopped) {
		t.Fatalf("Start after a failed Start: %v", err)
	}
	if err := l.Stop(func() error { t.Error("stop hook ran after a failed Start"); return nil }); err != nil {
		t.Fatal(err)
	}
}

// Stop waits for the calls Enter let in, and refuses Enter and Go once it
// has begun.
func TestStopWaitsForEnteredCalls(t *testing.T) {
	var l Lifecycle
	if err := l.Start(nil, nil); err != nil {
		t.Fatal(err)
	}
	if !l.Enter() {
		t.Fatal("Enter refused while running")
	}
	stopped := make(chan error, 1)
	go func() { stopped <- l.Stop(nil) }()
	// Stop has begun once Done is closed; from then on Enter refuses.
	<-l.Done()
	if l.Enter() {
		t.Fatal("Enter let a call in after Stop began")
	}
	if l.Go(func() { t.Error("Go ran fn after Stop began") }) {
		t.Fatal("Go accepted after Stop began")
	}
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned (%v) while an entered call was running", err)
	default:
	}
	if got := l.State(); got != Stopping {
		t.Fatalf("state %v during Stop, want stopping", got)
	}
	l.Exit()
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if got := l.State(); got != Stopped {
		t.Fatalf("state %v after Stop, want stopped", got)
	}
}

// Enter works on an idle value too (a handler served before Start), and
// Stop of an idle value waits for it.
func TestEnterWhileIdle(t *testing.T) {
	var l Lifecycle
	if !l.Enter() {
		t.Fatal("Enter refused while idle")
	}
	stopped := make(chan struct{})
	go func() { l.Stop(nil); close(stopped) }()
	<-l.Done()
	select {
	case <-stopped:
		t.Fatal("Stop of an idle value returned while an entered call was running")
	default:
	}
	l.Exit()
	<-stopped
}

// Run ends when Stop is called from elsewhere, and returns Stop's error;
// the stop hook runs once.
func TestRunEndsWithStop(t *testing.T) {
	var l Lifecycle
	var stops atomic.Int32
	stopErr := errors.New("stop failed")
	stop := func() error { stops.Add(1); return stopErr }
	running := make(chan struct{})
	ran := make(chan error, 1)
	go func() {
		ran <- l.Run(context.Background(), func() error { close(running); return nil },
			func(ctx context.Context) { <-ctx.Done() }, stop)
	}()
	<-running
	if err := l.Stop(stop); !errors.Is(err, stopErr) {
		t.Fatalf("Stop = %v", err)
	}
	if err := <-ran; !errors.Is(err, stopErr) {
		t.Fatalf("Run = %v, want Stop's error", err)
	}
	if n := stops.Load(); n != 1 {
		t.Fatalf("stop hook ran %d times", n)
	}
}

// Start, Run and Stop from many goroutines at once: exactly one start
// wins, every other call gets ErrRunning or ErrStopped (or nil from Stop),
// the hooks run once, and nothing is left running (goleak).
func TestConcurrent(t *testing.T) {
	for range 50 {
		k := &ticker{}
		var wg sync.WaitGroup
		var wins atomic.Int32
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		for i := range 12 {
			wg.Go(func() {
				var err error
				switch i % 3 {
				case 0:
					err = k.Start()
				case 1:
					err = k.Run(ctx)
				case 2:
					err = k.Stop()
				}
				switch {
				case err == nil && i%3 != 2:
					wins.Add(1)
				case err == nil, errors.Is(err, ErrRunning), errors.Is(err, ErrStopped):
				default:
					t.Errorf("call %d: %v", i, err)
				}
			})
		}
		// A Run that won must be ended: Stop does it.
		wg.Go(func() { k.Stop() })
		wg.Wait()
		cancel()
		if w := wins.Load(); w > 1 {
			t.Fatalf("%d starts succeeded", w)
		}
		if k.starts.Load() != k.stops.Load() || k.starts.Load() > 1 {
			t.Fatalf("start hook %d times, stop hook %d times", k.starts.Load(), k.stops.Load())
		}
		if k.life.State() != Stopped {
			t.Fatalf("state %v after Stop", k.life.State())
		}
	}
}
