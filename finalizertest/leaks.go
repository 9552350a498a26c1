package finalizertest

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/internal/queues"
)

// TestingT is the part of testing.TB that VerifyNone uses; *testing.T and
// *testing.B satisfy it.
type TestingT interface {
	Error(args ...any)
	Helper()
}

// VerifyNone fails t, with t.Error and the message of Find's error, if
// Find finds leaked finalizers or cleanups or cannot run. Use it at the
// end of a test, usually deferred at its top:
//
//	defer finalizertest.VerifyNone(t, finalizertest.IgnoreCurrent())
//
// See Find for what counts as a leak and the package documentation for
// parallel tests.
func VerifyNone(t TestingT, opts ...Option) {
	t.Helper()
	if err := Find(opts...); err != nil {
		t.Error(err)
	}
}

// Find forces GC cycles until every finalizer and cleanup that can run has
// run, then returns a *LeakError listing each call site that still has
// registrations outstanding in the watcher's ledger, or nil if none has.
//
// Precisely: Find first checks the ledger and returns nil at once if no
// site has more registrations outstanding than its baseline
// (IgnoreCurrent; zero without it). Otherwise it calls runtime.GC, waits
// until the finalizers and cleanups that cycle queued have finished
// (/gc/finalizers/executed and /gc/cleanups/executed in runtime/metrics
// catch up with their "queued" counterparts), and repeats until the
// watcher's GC clock (Snapshot.Cycles) has counted WithCycles cycles since
// Find began. A registration still outstanding then, at least that many
// cycles old, is a leak: its object was reachable all along, or its
// finalizer or cleanup keeps it reachable. Registrations younger than that
// were made while Find ran (by other goroutines) and are not counted.
//
// If the deadline (WithDeadline) passes first, for instance because a
// finalizer is blocked and holds up the queue behind it, Find returns an
// error that says what it was waiting for and lists what was outstanding;
// errors.Is(err, context.DeadlineExceeded) reports true for it. Invalid
// options make Find return an error naming the option, without forcing any
// GC.
//
// Find is safe for concurrent use, though concurrent calls force more GC
// cycles than one would.
func Find(opts ...Option) error {
	c, err := buildConfig(opts)
	if err != nil {
		return err
	}
	return c.find()
}

// Polling bounds while Find waits for the queues to drain: short enough
// that a healthy drain (microseconds) costs little, long enough that a
// blocked finalizer does not keep a core spinning.
const (
	minBackoff = 20 * time.Microsecond
	maxBackoff = 5 * time.Millisecond
)

func (c *config) find() error {
	w := c.watcher
	deadline := time.Now().Add(c.deadline)
	// Every site, counted exactly at each poll (a fresh ranking), read
	// into one snapshot that the polls reuse: the loop may poll thousands
	// of times while a queue drains. The candidates keep slices of the
	// latest read only, which is the one they are reported from.
	var sn finalizerwatch.Snapshot
	w.Read(&sn, finalizerwatch.ReadOptions{})
	clock0 := sn.Cycles
	q := queues.NewReader()
	var (
		mark    queues.Counts // queue counters read right after the last forced GC
		forced  int           // GC cycles forced so far
		settled bool          // every callback queued by the last forced GC has run
		backoff = minBackoff
	)
	for {
		w.Read(&sn, finalizerwatch.ReadOptions{TopK: -1, Stacks: true, Fresh: true})
		cands := c.candidates(sn.Top)
		if len(cands) == 0 {
			return nil
		}
		if settled {
			if elapsed(&sn, clock0, cands) >= uint64(c.cycles) {
				return c.leakError(cands, true)
			}
			// A watcher whose clock never moves (it was closed) cannot age
			// anything; after enough cycles, report what is outstanding.
			if forced >= 2*c.cycles+4 && elapsed(&sn, clock0, cands) == 0 {
				return c.leakError(cands, false)
			}
		}
		if time.Now().After(deadline) {
			return c.timeout(cands, settled, mark, q.Read(), elapsed(&sn, clock0, cands))
		}
		switch {
		case forced == 0 || settled:
			runtime.GC()
			forced++
			mark = q.Read()
			settled = false
			backoff = minBackoff
		case q.Read().DrainedSince(mark):
			settled = true
		default:
			// Polling, not synchronisation: the queues have no channel to
			// wait on, and the deadline bounds the loop.
			time.Sleep(backoff)
			backoff = min(2*backoff, maxBackoff)
		}
	}
}

// candidates returns the sites, not ignored, with more registrations
// outstanding than their baseline, Leaked set to that excess, in the
// ledger's rank order.
func (c *config) candidates(sites []finalizerwatch.SiteStats) []Leak {
	var out []Leak
	for i := range sites {
		s := &sites[i]
		if c.ignored(s) {
			continue
		}
		base := c.baseline.of(s)
		if s.Outstanding > base {
			out = append(out, Leak{SiteStats: *s, Baseline: base, Leaked: s.Outstanding - base})
		}
	}
	return out
}

// elapsed returns the GC cycles that the watcher's clock had counted at
// the read sn since clock0, for the slowest kind among cands.
func elapsed(sn *finalizerwatch.Snapshot, clock0 [len(finalizerwatch.Kinds)]uint64, cands []Leak) uint64 {
	least := ^uint64(0)
	for _, l := range cands {
		least = min(least, sn.Cycles[l.Kind]-clock0[l.Kind])
	}
	return least
}

// leakError builds Find's result from the candidates. With aged, only
// registrations at least c.cycles old count (see Find); otherwise every
// excess registration does.
func (c *config) leakError(cands []Leak, aged bool) error {
	var leaks []Leak
	for _, l := range cands {
		if aged {
			var old uint64
			for _, n := range l.Survived[c.cycles:] {
				old += n
			}
			l.Leaked = 0
			if old > l.Baseline {
				l.Leaked = old - l.Baseline
			}
		}
		if l.Leaked > 0 {
			leaks = append(leaks, l)
		}
	}
	if len(leaks) == 0 {
		return nil
	}
	return &LeakError{Leaks: leaks, Cycles: c.cycles, clockStopped: !aged}
}

// Leak is one call site that Find found leaking.
type Leak struct {
	// SiteStats is the site's ledger as Find last read it: its counts,
	// the ages of its outstanding registrations (Survived) and its
	// registration stack.
	finalizerwatch.SiteStats
	// Baseline is the site's outstanding count when the IgnoreCurrent
	// snapshot was taken (0 without one).
	Baseline uint64
	// Leaked is how many of the site's registrations Find counts as
	// leaked: those at least WithCycles cycles old, less Baseline.
	Leaked uint64
}

// LeakError is the error Find returns when it finds leaks.
type LeakError struct {
	// Leaks has one entry per leaking site, in the ledger's rank order
	// (finalizerwatch.Snapshot.Top): those whose leak is still growing
	// (finalizerwatch.ClassGrowing) first, by their growth, then by
	// suspects.
	Leaks []Leak
	// Cycles is the number of GC cycles a registration had to survive to
	// count as leaked (WithCycles).
	Cycles int

	clockStopped bool
}

// Error lists every leaking site with its counts, the cycles its
// registrations survived and its registration stack.
func (e *LeakError) Error() string {
	var b strings.Builder
	var total uint64
	for _, l := range e.Leaks {
		total += l.Leaked
	}
	fmt.Fprintf(&b, "finalizertest: %d leaked registration(s) at %d call site(s), still outstanding after %d forced GC cycles:",
		total, len(e.Leaks), e.Cycles)
	if e.clockStopped {
		b.WriteString("\n(the watcher's GC clock did not advance, as after Watcher.Close: every outstanding registration is listed, whatever its age)")
	}
	for i := range e.Leaks {
		writeLeak(&b, &e.Leaks[i], "leaked")
	}
	return b.String()
}

// writeLeak formats one site: "kind function file:line", its counts, the
// cycles its registrations survived, and its registration stack.
func writeLeak(b *strings.Builder, l *Leak, what string) {
	fmt.Fprintf(b, "\n\n%s %s\n", l.Kind, l.Site)
	fmt.Fprintf(b, "\tregistered %d, outstanding %d, %s %d", l.Registered, l.Outstanding, what, l.Leaked)
	if l.Baseline > 0 {
		fmt.Fprintf(b, " (%d outstanding at the IgnoreCurrent snapshot)", l.Baseline)
	}
	// Ages: "survived: 7 for 3 cycles, 2 for 16+ cycles".
	b.WriteString("\n\tsurvived:")
	sep := " "
	for age, n := range l.Survived {
		if n == 0 {
			continue
		}
		plus := ""
		if age == len(l.Survived)-1 {
			plus = "+"
		}
		fmt.Fprintf(b, "%s%d for %d%s cycles", sep, n, age, plus)
		sep = ", "
	}
	switch l.Class {
	case finalizerwatch.ClassGrowing:
		fmt.Fprintf(b, "\n\tgrowing: +%d suspects over the last %d GC cycles observed", l.Growth, finalizerwatch.GrowthWindow)
	case finalizerwatch.ClassStable:
		b.WriteString("\n\tstable: long-lived, not growing")
	}
	b.WriteString("\n\tregistration stack:")
	for _, f := range l.Stack {
		fmt.Fprintf(b, "\n\t\t%s\n\t\t\t%s:%d", f.Function, f.File, f.Line)
	}
}

// timeoutError is Find's error when its deadline passes.
type timeoutError struct{ msg string }

func (e *timeoutError) Error() string { return e.msg }

// Unwrap makes errors.Is(err, context.DeadlineExceeded) hold.
func (e *timeoutError) Unwrap() error { return context.DeadlineExceeded }

func (c *config) timeout(cands []Leak, settled bool, mark, now queues.Counts, clock uint64) error {
	var b strings.Builder
	fmt.Fprintf(&b, "finalizertest: gave up after %v (WithDeadline) waiting for ", c.deadline)
	switch {
	case !settled && now[1] < mark[0]:
		fmt.Fprintf(&b, "the finalizer queue to drain (%d finalizers still to run): a finalizer may be blocked or slow", mark[0]-now[1])
	case !settled && now[3] < mark[2]:
		fmt.Fprintf(&b, "the cleanup queue to drain (%d cleanups still to run): a cleanup may be blocked or slow", mark[2]-now[3])
	default:
		fmt.Fprintf(&b, "the watcher's GC clock, which counted %d of %d cycles", clock, c.cycles)
	}
	fmt.Fprintf(&b, "; outstanding at %d call site(s):", len(cands))
	for i := range cands {
		writeLeak(&b, &cands[i], "in excess of the baseline")
	}
	return &timeoutError{msg: b.String()}
}
