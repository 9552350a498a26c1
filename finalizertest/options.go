package finalizertest

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/internal/sitekey"
)

// Defaults for the options of Find, VerifyNone and VerifyTestMain.
const (
	// DefaultCycles is how many GC cycles Find forces (and waits for the
	// watcher's clock to count) before it calls an outstanding registration
	// a leak. A healthy finalizer or cleanup runs after one cycle; a chain
	// of k objects whose finalizers each keep the next one reachable needs
	// k cycles, so the default leaves room for chains of two with a cycle to
	// spare.
	DefaultCycles = 3
	// MaxCycles is the largest value WithCycles accepts: the watcher keeps
	// exact ages up to finalizerwatch.AgeBuckets-2 cycles and pools older
	// ones in one bucket.
	MaxCycles = finalizerwatch.AgeBuckets - 1
	// DefaultDeadline bounds how long Find waits for the GC cycles and for
	// the finalizer and cleanup queues to drain.
	DefaultDeadline = 10 * time.Second
)

// Option configures Find, VerifyNone and VerifyTestMain. Options are
// validated when they are used: a bad value, or a nil Option, makes Find
// return an error that names it (VerifyNone reports it with t.Error).
type Option func(*config) error

// config is what the options build.
type config struct {
	watcher  *finalizerwatch.Watcher
	cycles   int
	deadline time.Duration
	baseline *baseline
	ignores  []func(*finalizerwatch.SiteStats) bool
}

func buildConfig(opts []Option) (*config, error) {
	c := &config{
		watcher:  finalizerwatch.Default,
		cycles:   DefaultCycles,
		deadline: DefaultDeadline,
	}
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("finalizertest: Find: nil Option")
		}
		if err := o(c); err != nil {
			return nil, err
		}
	}
	// Checked once every option is in, so that their order does not matter.
	if c.baseline != nil && c.baseline.w != c.watcher {
		return nil, errors.New("finalizertest: IgnoreCurrent: the baseline was taken of a different Watcher " +
			"than the one checked (IgnoreCurrent snapshots finalizerwatch.Default; " +
			"with WithWatcher(w) use IgnoreCurrentOf(w))")
	}
	return c, nil
}

// WithWatcher checks the ledger of w instead of finalizerwatch.Default.
// Tests that make their own Watcher (finalizerwatch.New) pass it here.
func WithWatcher(w *finalizerwatch.Watcher) Option {
	return func(c *config) error {
		if w == nil {
			return errors.New("finalizertest: WithWatcher: nil Watcher")
		}
		c.watcher = w
		return nil
	}
}

// WithCycles sets how many GC cycles Find forces before an outstanding
// registration counts as leaked (default DefaultCycles, 1 to MaxCycles).
// Raise it for code whose finalizers release objects that have
// finalizers of their own: each link of such a chain takes one cycle.
func WithCycles(n int) Option {
	return func(c *config) error {
		if n < 1 || n > MaxCycles {
			return fmt.Errorf("finalizertest: WithCycles: must be in [1, %d], got %d", MaxCycles, n)
		}
		c.cycles = n
		return nil
	}
}

// WithDeadline bounds how long Find waits for its GC cycles and for the
// finalizer and cleanup queues to drain (default DefaultDeadline). When it
// passes, Find returns an error that says what it was still waiting for
// and lists the registrations outstanding at that moment.
func WithDeadline(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("finalizertest: WithDeadline: must be > 0, got %v", d)
		}
		c.deadline = d
		return nil
	}
}

// IgnoreSite ignores every call site whose label, "function file:line" as
// finalizerwatch.SiteStats.Site formats it, contains substr: a file name
// ("pool.go"), a file and line ("pool.go:42") or a package path.
func IgnoreSite(substr string) Option {
	return func(c *config) error {
		if substr == "" {
			return errors.New("finalizertest: IgnoreSite: empty string would ignore every site")
		}
		c.ignores = append(c.ignores, func(s *finalizerwatch.SiteStats) bool {
			return strings.Contains(s.Site.String(), substr)
		})
		return nil
	}
}

// IgnoreFunction ignores every call site whose registration stack has a
// frame in the function name, fully qualified as the runtime spells it
// ("example.com/pool.(*Pool).grow"). The site's own function is always in
// its stack. Unless the watcher keeps full stacks
// (finalizerwatch.WithFullStacks), a site's stack is that of its first
// registration, so only the site's own function is certain to match.
func IgnoreFunction(name string) Option {
	return func(c *config) error {
		if name == "" {
			return errors.New("finalizertest: IgnoreFunction: empty function name")
		}
		c.ignores = append(c.ignores, func(s *finalizerwatch.SiteStats) bool {
			if s.Site.Function == name {
				return true
			}
			for _, f := range s.Stack {
				if f.Function == name {
					return true
				}
			}
			return false
		})
		return nil
	}
}

// IgnoreCurrent snapshots, when it is called, how many registrations are
// outstanding at each call site of finalizerwatch.Default, and makes Find
// report only what a site has in excess of that baseline. Called in the
// defer statement at the top of a test, it sets the baseline at the
// test's start, as goleak.IgnoreCurrent does for goroutines:
//
//	defer finalizertest.VerifyNone(t, finalizertest.IgnoreCurrent())
//
// The baseline is a count per site, not a list of registrations: if
// registrations from before the snapshot are released during the test,
// as many new leaks at the same site go unreported.
func IgnoreCurrent() Option {
	return IgnoreCurrentOf(finalizerwatch.Default)
}

// IgnoreCurrentOf is IgnoreCurrent for the Watcher w, which must be the
// one checked (WithWatcher(w)).
func IgnoreCurrentOf(w *finalizerwatch.Watcher) Option {
	if w == nil {
		return func(*config) error {
			return errors.New("finalizertest: IgnoreCurrentOf: nil Watcher")
		}
	}
	b := takeBaseline(w)
	return func(c *config) error {
		c.baseline = b
		return nil
	}
}

// baseline is the outstanding count per site of one watcher at one moment.
type baseline struct {
	w           *finalizerwatch.Watcher
	outstanding map[sitekey.Key]uint64
}

func takeBaseline(w *finalizerwatch.Watcher) *baseline {
	b := &baseline{w: w, outstanding: make(map[sitekey.Key]uint64)}
	var sn finalizerwatch.Snapshot
	w.Read(&sn, finalizerwatch.ReadOptions{TopK: -1, Fresh: true})
	for _, s := range sn.Top {
		if s.Outstanding > 0 {
			b.outstanding[sitekey.Of(&s)] = s.Outstanding
		}
	}
	return b
}

// of returns the baseline of site s (0 without a baseline).
func (b *baseline) of(s *finalizerwatch.SiteStats) uint64 {
	if b == nil {
		return 0
	}
	return b.outstanding[sitekey.Of(s)]
}

func (c *config) ignored(s *finalizerwatch.SiteStats) bool {
	for _, ig := range c.ignores {
		if ig(s) {
			return true
		}
	}
	return false
}
