// Package lifecycle is the one state machine behind every long-lived gcprobe
// type that starts goroutines (memstats.Sampler, tracing.Reporter and the
// root Probe): idle → running → stopped, once.
//
// The rules, the same for every type that embeds a Lifecycle:
//
//   - A value runs at most once. Start (or Run) moves it from idle to
//     running; a second Start while it runs fails with ErrRunning.
//   - Stop moves it to stopped for good, from any state, and is
//     idempotent: every call waits until the first has finished and
//     returns its result. Start or Run on a stopped value fails with
//     ErrStopped. A Start that fails leaves the value stopped too, after
//     undoing what it had begun: no half-started value is ever left
//     behind.
//   - Run's run ends when its context ends or Stop is called; either way
//     the value is then stopped, and Run returns Stop's result.
//   - Stop waits for everything the value started: the goroutines started
//     through Go, the body of a Run, and the calls that Enter let in (an
//     HTTP handler, say). Once Stop has begun, Go and Enter refuse, so the
//     wait has an end.
//
// Stop must not be called from a goroutine that Stop waits for (one started
// with Go, or inside Enter/Exit): it would wait for itself.
package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// The sentinels every package re-exports under its own name
// (memstats.ErrStopped, probe.ErrStopped, ...), so that errors.Is works
// with whichever the caller has at hand.
var (
	// ErrRunning is wrapped by the error of Start or Run on a value that
	// already runs.
	ErrRunning = errors.New("already running; a value is started once")
	// ErrStopped is wrapped by the error of Start or Run on a value that
	// was stopped (or whose Start failed): a stopped value cannot be
	// started again; make a new one.
	ErrStopped = errors.New("stopped; a stopped value cannot be started again, make a new one")
)

// State is where a Lifecycle is.
type State int32

// The states, in the only order a Lifecycle goes through them (idle may go
// straight to stopped).
const (
	Idle State = iota
	Running
	Stopping
	Stopped
)

// String returns the state's name: "idle", "running", "stopping" or
// "stopped".
func (s State) String() string {
	switch s {
	case Idle:
		return "idle"
	case Running:
		return "running"
	case Stopping:
		return "stopping"
	case Stopped:
		return "stopped"
	}
	return fmt.Sprintf("State(%d)", int32(s))
}

// Lifecycle is embedded (as a value) in the type it governs. Its zero value
// is idle and ready; Name, set before first use, prefixes its errors
// (e.g. "memstats: Sampler").
type Lifecycle struct {
	// Name is what the errors of Start and Run are about.
	Name string
	// RunName is the method that calls Run, for its errors: "Run" when
	// empty (the root Probe's is "Start").
	RunName string

	// mu serialises the transitions: Start's and Stop's hooks run under
	// it, so a Stop that comes while Start runs its hook waits for it, and
	// two Stops never run the stop hook twice. Nothing that Stop waits for
	// may take it.
	mu      sync.Mutex
	state   atomic.Int32 // a State; written under mu, read anywhere
	stopErr error

	// ctx is done once Stop has begun: the signal the value's goroutines
	// select on. Made on first use, under gmu.
	ctx    context.Context
	cancel context.CancelFunc

	// gmu guards closing and every wg.Add, so that no Add can happen once
	// Stop's wg.Wait may have begun (the WaitGroup rule).
	gmu     sync.Mutex
	closing bool
	wg      sync.WaitGroup
}

// initLocked makes the stop context; callers hold gmu.
func (l *Lifecycle) initLocked() {
	if l.ctx == nil {
		l.ctx, l.cancel = context.WithCancel(context.Background())
	}
}

// Done returns a channel closed once Stop has begun. The value's goroutines
// select on it to know when to end.
func (l *Lifecycle) Done() <-chan struct{} {
	l.gmu.Lock()
	defer l.gmu.Unlock()
	l.initLocked()
	return l.ctx.Done()
}

// State returns the current state. It may have changed by the time the
// caller looks at it; it is for tests and reports, not for decisions.
func (l *Lifecycle) State() State { return State(l.state.Load()) }

// Start moves the value from idle to running and runs start, which may
// start goroutines with Go. If start fails, the value is stopped (undo, if
// not nil, runs first, then everything start began is waited for) and the
// error is returned. Start on a running value returns an error wrapping
// ErrRunning, on a stopped one an error wrapping ErrStopped; neither runs
// start.
func (l *Lifecycle) Start(start, undo func() error) error {
	return l.begin("Start", start, undo)
}

func (l *Lifecycle) begin(op string, start, undo func() error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch State(l.state.Load()) {
	case Running:
		return fmt.Errorf("%s.%s: %w", l.Name, op, ErrRunning)
	case Stopped:
		return fmt.Errorf("%s.%s: %w", l.Name, op, ErrStopped)
	}
	l.state.Store(int32(Running))
	if start == nil {
		return nil
	}
	if err := start(); err != nil {
		l.stopLocked(undo)
		return err
	}
	return nil
}

// Run starts the value as Start does, then runs body on the calling
// goroutine with a context that ends when ctx ends or Stop begins. When
// body returns, the value is stopped (with stop, as Stop does) and Run
// returns Stop's result. body counts as one of the things Stop waits for.
func (l *Lifecycle) Run(ctx context.Context, start func() error, body func(context.Context), stop func() error) error {
	// body is counted before start runs, under mu: a Stop cannot slip in
	// between the start and the count and miss it.
	op := l.RunName
	if op == "" {
		op = "Run"
	}
	var bodyCounted bool
	err := l.begin(op, func() error {
		l.gmu.Lock()
		l.initLocked()
		l.wg.Add(1)
		bodyCounted = true
		l.gmu.Unlock()
		if start != nil {
			return start()
		}
		return nil
	}, func() error {
		// Start failed: body never runs.
		if bodyCounted {
			l.wg.Done()
			bodyCounted = false
		}
		if stop == nil {
			return nil
		}
		return stop()
	})
	if err != nil {
		return err
	}
	func() {
		defer l.wg.Done()
		runCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		l.gmu.Lock()
		stopCtx := l.ctx
		l.gmu.Unlock()
		unhook := context.AfterFunc(stopCtx, cancel)
		defer unhook()
		body(runCtx)
	}()
	return l.Stop(stop)
}

// Stop moves the value to stopped: it closes Done, refuses new Go and Enter
// calls, runs stop (if the value was started and stop is not nil), waits
// for everything it started, and returns stop's error. Later calls wait for
// the first one to finish and return the same error.
func (l *Lifecycle) Stop(stop func() error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch State(l.state.Load()) {
	case Stopped:
		return l.stopErr
	case Idle:
		stop = nil // nothing was started
	}
	return l.stopLocked(stop)
}

// stopLocked does Stop's work; callers hold mu.
func (l *Lifecycle) stopLocked(stop func() error) error {
	if State(l.state.Load()) == Running {
		l.state.Store(int32(Stopping))
	}
	l.gmu.Lock()
	l.initLocked()
	l.closing = true
	l.cancel()
	l.gmu.Unlock()
	var err error
	if stop != nil {
		err = stop()
	}
	l.wg.Wait()
	l.stopErr = err
	l.state.Store(int32(Stopped))
	return err
}

// Go runs fn in a goroutine that Stop waits for, and reports whether it
// did: once Stop has begun it refuses, and fn does not run.
func (l *Lifecycle) Go(fn func()) bool {
	if !l.Enter() {
		return false
	}
	go func() {
		defer l.Exit()
		fn()
	}()
	return true
}

// Enter counts one call that Stop must wait for, such as an HTTP handler
// running probe code, and reports whether it may go ahead: once Stop has
// begun it refuses. Each Enter that returns true needs one Exit.
func (l *Lifecycle) Enter() bool {
	l.gmu.Lock()
	defer l.gmu.Unlock()
	if l.closing {
		return false
	}
	l.wg.Add(1)
	return true
}

// Exit ends a call that Enter let in.
func (l *Lifecycle) Exit() { l.wg.Done() }
