// Package lifecycletest checks a long-lived type against the rules of
// package lifecycle: every order of Start, Run and Stop gives the answer the
// state machine gives, calls from many goroutines at once start it at most
// once, and the final Stop leaves no goroutine behind (goleak).
package lifecycletest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gcprobe/probe/internal/lifecycle"
)

// Subject is one value of the type under test, seen through its lifecycle
// methods.
type Subject struct {
	// Start starts it in the background (memstats.Sampler.Start, the
	// probe's package-level Start on an existing value). Nil if the type
	// has none.
	Start func() error
	// Run runs it until ctx ends or Stop (Sampler.Run, (*Probe).Start).
	Run func(ctx context.Context) error
	// Stop stops it.
	Stop func() error
	// State is its lifecycle's state.
	State func() lifecycle.State
}

// Ops a sequence is made of.
const (
	opStart  = "Start"
	opRun    = "Run(ended ctx)" // Run with a context already done: runs, then stops
	opRunBG  = "Run(ctx) in bg" // Run on another goroutine, until Stop
	opStop   = "Stop"
	maxLen   = 3                // sequences of up to maxLen ops, every order
	waitFor  = 10 * time.Second // the longest a background Run may take to start
	refusals = "nil, ErrRunning or ErrStopped"
)

// model is what the state machine answers.
type model struct{ state lifecycle.State }

func (m *model) apply(op string) error {
	switch op {
	case opStart, opRunBG, opRun:
		switch m.state {
		case lifecycle.Running:
			return lifecycle.ErrRunning
		case lifecycle.Stopped:
			return lifecycle.ErrStopped
		}
		m.state = lifecycle.Running
		if op == opRun {
			m.state = lifecycle.Stopped
		}
	case opStop:
		m.state = lifecycle.Stopped
	}
	return nil
}

// Matrix runs every sequence of up to three of Start, Run and Stop on a
// fresh Subject from newSubject, whose state is initial (lifecycle.Idle
// after New, lifecycle.Running after a constructor that starts it), and
// checks each call's error against the state machine, then that a final
// Stop leaves the Subject stopped and no goroutine behind. opts go to
// goleak.VerifyNone.
func Matrix(t *testing.T, newSubject func(t *testing.T) Subject, initial lifecycle.State, opts ...goleak.Option) {
	t.Helper()
	first := newSubject(t)
	ops := []string{opRun, opRunBG, opStop}
	if first.Start != nil {
		ops = append(ops, opStart)
	}
	_ = first.Stop()
	for _, seq := range sequences(ops, maxLen) {
		t.Run(fmt.Sprint(seq), func(t *testing.T) {
			s := newSubject(t)
			m := model{state: initial}
			var bg []chan error
			for i, op := range seq {
				want := m.apply(op)
				var err error
				switch op {
				case opStart:
					err = s.Start()
				case opRun:
					ctx, cancel := context.WithCancel(context.Background())
					cancel()
					err = s.Run(ctx)
				case opStop:
					err = s.Stop()
				case opRunBG:
					errc := make(chan error, 1)
					go func() { errc <- s.Run(context.Background()) }()
					if want != nil {
						err = <-errc
						break
					}
					bg = append(bg, errc)
					waitRunning(t, s, errc)
				}
				if !sameAnswer(err, want) {
					t.Fatalf("op %d (%s): %v, want %v", i, op, err, want)
				}
			}
			if err := s.Stop(); err != nil {
				t.Fatalf("final Stop: %v", err)
			}
			for _, errc := range bg {
				if err := <-errc; err != nil {
					t.Fatalf("background Run ended by Stop returned %v", err)
				}
			}
			if got := s.State(); got != lifecycle.Stopped {
				t.Fatalf("state %v after Stop", got)
			}
		})
	}
	goleak.VerifyNone(t, opts...)
}

// Concurrent calls Start, Run and Stop from goroutines goroutines at once,
// rounds times on a fresh Subject each time: at most one start succeeds,
// every other call is refused with ErrRunning or ErrStopped (Stop returns
// nil), and after the last Stop the Subject is stopped and no goroutine is
// left (goleak).
func Concurrent(t *testing.T, newSubject func(t *testing.T) Subject, rounds, goroutines int, opts ...goleak.Option) {
	t.Helper()
	for range rounds {
		s := newSubject(t)
		var wg sync.WaitGroup
		var wins atomic.Int32
		start := make(chan struct{})
		for i := range goroutines {
			wg.Go(func() {
				<-start
				var err error
				switch {
				case i%3 == 0 && s.Start != nil:
					err = s.Start()
				case i%3 == 2:
					if err = s.Stop(); err != nil {
						t.Errorf("Stop: %v", err)
					}
					return
				default:
					// Ends with Stop, or at once if a Stop came first.
					err = s.Run(context.Background())
				}
				switch {
				case err == nil:
					wins.Add(1)
				case errors.Is(err, lifecycle.ErrRunning), errors.Is(err, lifecycle.ErrStopped):
				default:
					t.Errorf("call %d: %v, want %s", i, err, refusals)
				}
			})
		}
		close(start)
		// Whatever won must be stopped, or the Runs never return.
		wg.Go(func() {
			<-start
			_ = s.Stop()
		})
		wg.Wait()
		if w := wins.Load(); w > 1 {
			t.Fatalf("%d starts succeeded at once", w)
		}
		if got := s.State(); got != lifecycle.Stopped {
			t.Fatalf("state %v after Stop", got)
		}
	}
	goleak.VerifyNone(t, opts...)
}

func waitRunning(t *testing.T, s Subject, errc chan error) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for s.State() != lifecycle.Running {
		select {
		case err := <-errc:
			t.Fatalf("background Run returned %v before running", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("background Run not running after %v (state %v)", waitFor, s.State())
		}
		time.Sleep(time.Millisecond) // polling interval
	}
}

func sameAnswer(err, want error) bool {
	if want == nil {
		return err == nil
	}
	return errors.Is(err, want)
}

// sequences returns every sequence of 1 to n ops.
func sequences(ops []string, n int) [][]string {
	var out [][]string
	cur := [][]string{nil}
	for range n {
		var next [][]string
		for _, p := range cur {
			for _, op := range ops {
				next = append(next, append(p[:len(p):len(p)], op))
			}
		}
		out = append(out, next...)
		cur = next
	}
	return out
}
