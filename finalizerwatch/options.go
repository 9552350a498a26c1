package finalizerwatch

import (
	"errors"
	"fmt"
	"time"

	"github.com/gcprobe/probe/stackcapture"
)

// Defaults for a Watcher's options.
const (
	// DefaultMaxSites is how many distinct call sites (stacks, with
	// WithFullStacks) a Watcher keeps a ledger for; registrations from
	// further sites are counted under one overflow entry per kind.
	DefaultMaxSites = 4096
	// DefaultMaxStacks is how many distinct registration stacks are kept.
	DefaultMaxStacks = stackcapture.DefaultLimit
	// MaxSitesLimit is the largest value WithMaxSites accepts. The site
	// table's index grows with the sites it holds, 11 to 22 bytes a site
	// (at most 32 MiB here), and each site takes a few hundred bytes more.
	MaxSitesLimit = 1 << 21
	// MaxStacksLimit is the largest value WithMaxStacks accepts.
	MaxStacksLimit = stackcapture.MaxLimit
	// DefaultSuspectCycles is how many GC cycles an outstanding
	// registration must survive before it counts as a leak suspect.
	DefaultSuspectCycles = 3
	// MaxSuspectCycles is the largest value WithSuspectCycles accepts: ages
	// are kept exactly up to AgeBuckets-2 cycles.
	MaxSuspectCycles = AgeBuckets - 2
	// MaxSuspectAge is the largest value WithSuspectAge accepts.
	MaxSuspectAge = time.Hour
	// DefaultStackSampleRate is how many registrations, on average, make
	// one that captures its full stack (see WithStackSampleRate): rare
	// enough that capturing costs under a nanosecond per registration on
	// average, frequent enough that a site registering a few times a
	// second has its paths sampled within minutes.
	DefaultStackSampleRate = 512
)

// Option configures a Watcher.
type Option func(*config) error

type config struct {
	maxSites        int
	maxStacks       int
	fullStacks      bool
	suspectCycles   int
	stackSampleRate int
	// suspectAge is the wall time a registration must also have been
	// outstanding to be a suspect (epoch.go); 0 for none.
	suspectAge time.Duration
	// noWrappers turns off the detection of wrappers (callers.go).
	noWrappers bool
	// now is the watcher's clock, in monotonic nanoseconds: monoNow, or a
	// test's.
	now func() int64
}

func defaultConfig() config {
	return config{
		maxSites:        DefaultMaxSites,
		maxStacks:       DefaultMaxStacks,
		suspectCycles:   DefaultSuspectCycles,
		stackSampleRate: DefaultStackSampleRate,
		now:             monoNow,
	}
}

// WithMaxSites bounds the number of ledger entries (default
// DefaultMaxSites, 1 to MaxSitesLimit). Past it, new sites are counted
// together under a site named "gcprobe.overflow".
func WithMaxSites(n int) Option {
	return func(c *config) error {
		if n <= 0 || n > MaxSitesLimit {
			return fmt.Errorf("finalizerwatch: WithMaxSites: must be in [1, %d], got %d", MaxSitesLimit, n)
		}
		c.maxSites = n
		return nil
	}
}

// WithMaxStacks bounds the number of distinct registration stacks kept
// (default DefaultMaxStacks, 1 to MaxStacksLimit). Past it, a registration
// is still counted exactly at its site; only its full stack is not kept.
func WithMaxStacks(n int) Option {
	return func(c *config) error {
		if n <= 0 || n > MaxStacksLimit {
			return fmt.Errorf("finalizerwatch: WithMaxStacks: must be in [1, %d], got %d", MaxStacksLimit, n)
		}
		c.maxStacks = n
		return nil
	}
}

// WithFullStacks makes every registration capture its full stack (a
// frame-pointer walk, about 5 ns a frame, with runtime.Callers where the
// walk cannot be trusted) and keeps a ledger entry per distinct stack, so
// that two paths into one site are told apart exactly. By default only the
// call site is captured on each registration (a few nanoseconds), the full
// stack of a site's first registration is kept as its representative, and
// one registration in StackSampleRate is sampled (WithStackSampleRate).
func WithFullStacks(on bool) Option {
	return func(c *config) error {
		c.fullStacks = on
		return nil
	}
}

// WithStackSampleRate makes one registration in rate, chosen at random,
// capture its full stack and count it in a table of sampled stacks
// (StackSamples), as runtime.MemProfileRate samples allocations: the
// stacks through which a site registers, at a fraction of the cost of
// capturing every one. Site counts stay exact; a sampled stack's counts,
// scaled by the rate, are unbiased estimates. Rate 0 turns sampling off;
// the default is DefaultStackSampleRate. With WithFullStacks every stack is
// kept exactly, and nothing is sampled.
func WithStackSampleRate(rate int) Option {
	return func(c *config) error {
		if rate < 0 {
			return fmt.Errorf("finalizerwatch: WithStackSampleRate: must be >= 0, got %d", rate)
		}
		c.stackSampleRate = rate
		return nil
	}
}

// WithSuspectCycles sets how many GC cycles an outstanding registration
// must survive to count as a leak suspect (default DefaultSuspectCycles,
// 1 to MaxSuspectCycles).
func WithSuspectCycles(n int) Option {
	return func(c *config) error {
		if n < 1 || n > MaxSuspectCycles {
			return fmt.Errorf("finalizerwatch: WithSuspectCycles: must be in [1, %d], got %d", MaxSuspectCycles, n)
		}
		c.suspectCycles = n
		return nil
	}
}

// WithSuspectAge sets how long, in wall time, an outstanding registration
// must also have been outstanding to count as a leak suspect, besides its
// SuspectCycles GC cycles (default 0: cycles alone; at most MaxSuspectAge).
// With an age set, the watcher's cycles (Snapshot.Cycles, the ages of
// SiteStats.Survived) are GC cycles taken together so that each lasts at
// least a sixth of it, and a site is classed growing only once its
// suspects have kept reaching new highs for at least as long: a program
// that runs fifty GC cycles a second is then judged over seconds, not
// milliseconds, and a pool warming up or files opened at start-up and kept
// are never taken for a leak. Long-running programs want one (the probe's
// default is 30 s); a test that forces GC cycles to find a leak does not.
func WithSuspectAge(d time.Duration) Option {
	return func(c *config) error {
		if err := checkSuspectAge("WithSuspectAge", d); err != nil {
			return err
		}
		c.suspectAge = d
		return nil
	}
}

// WithWrapperDetection turns on or off (default on) the watcher's
// detection of helpers that forward registrations for more than one
// caller line: a helper it finds joins the process's look-through set
// (stackcapture.LookThrough), and registrations through it are counted at
// their callers' lines from then on, by every watcher.
func WithWrapperDetection(on bool) Option {
	return func(c *config) error {
		c.noWrappers = !on
		return nil
	}
}

// checkSuspectAge is WithSuspectAge's and SetSuspectAge's check of d.
func checkSuspectAge(fn string, d time.Duration) error {
	if d < 0 || d > MaxSuspectAge {
		return fmt.Errorf("finalizerwatch: %s: must be in [0, %v], got %v", fn, MaxSuspectAge, d)
	}
	return nil
}

func (c *config) apply(opts []Option) error {
	for _, o := range opts {
		if o == nil {
			return errors.New("finalizerwatch: New: nil Option")
		}
		if err := o(c); err != nil {
			return err
		}
	}
	return nil
}
