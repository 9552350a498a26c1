package heapprofile

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// Defaults. Each can be changed with the option named in its comment.
const (
	// DefaultInterval is how often a started Profiler reads the heap
	// profile, and so the window the allocating sites cover
	// (WithInterval).
	DefaultInterval = 10 * time.Second
	// MinInterval is the floor of WithInterval: a read walks every
	// bucket, and the runtime publishes the profile once per GC cycle.
	MinInterval = 10 * time.Millisecond
	// DefaultMaxBuckets bounds the profile's buckets a read copies
	// (WithMaxBuckets): 16384 records are 4.5 MiB. A bigger profile is
	// not read (Snapshot.Status is StatusOverflow, the skip counted in
	// Snapshot.Skipped) and the bound is raised for the next read, up to
	// BoundCeiling times this (18 MiB).
	DefaultMaxBuckets = 16384
	// DefaultTopK is how many sites each top list holds (WithTopK). It
	// is 10 as finalizerwatch.DefaultTopK is, but not that constant: the
	// lists rank heap-profile sites, not the ledger's (see "Top lists: a
	// K of their own" in the package documentation).
	DefaultTopK = 10
	// MaxTopK bounds WithTopK.
	MaxTopK = 1000
	// DefaultGrowingWindows is how many consecutive windows a site's
	// in-use bytes must have grown for it to be a growing site
	// (WithGrowing).
	DefaultGrowingWindows = 3
	// DefaultGrowingBytes is how much a site's in-use bytes must have
	// grown over those windows (WithGrowing): twice the default sampling
	// rate, so that the noise of one sample more or less is not growth.
	DefaultGrowingBytes = 1 << 20
)

// ErrInvalidOption is wrapped by every error New returns for a bad option
// value; errors.As with *OptionError tells which option.
var ErrInvalidOption = errors.New("heapprofile: invalid option")

// OptionError reports an option New rejected.
type OptionError struct {
	// Option is the option's function name, e.g. "WithInterval".
	Option string
	// Reason says what is wrong with the value.
	Reason string
}

// Error returns e.g. "heapprofile: WithTopK: k must be between 1 and 1000, got 0".
func (e *OptionError) Error() string { return "heapprofile: " + e.Option + ": " + e.Reason }

// Unwrap returns ErrInvalidOption.
func (e *OptionError) Unwrap() error { return ErrInvalidOption }

func optionErr(option, format string, args ...any) error {
	return &OptionError{Option: option, Reason: fmt.Sprintf(format, args...)}
}

// An Option configures a Profiler. Options are validated by New: a bad
// value, or a nil Option, is an *OptionError naming it.
type Option func(*config) error

type config struct {
	interval       time.Duration
	maxBuckets     int
	topK           int
	growingWindows int
	growingBytes   int64
	now            func() time.Time
	sigs           []Signature // WithSignatures (signatures.go)
}

func defaultConfig() config {
	return config{
		interval:       DefaultInterval,
		maxBuckets:     DefaultMaxBuckets,
		topK:           DefaultTopK,
		growingWindows: DefaultGrowingWindows,
		growingBytes:   DefaultGrowingBytes,
		now:            time.Now,
	}
}

// WithInterval sets how often a started Profiler reads the profile; at
// least MinInterval. Default DefaultInterval.
func WithInterval(d time.Duration) Option {
	return func(c *config) error {
		if d < MinInterval {
			return optionErr("WithInterval", "interval must be at least %v, got %v", MinInterval, d)
		}
		c.interval = d
		return nil
	}
}

// WithMaxBuckets bounds the profile buckets a read copies, at least 1: a
// read holds RecordBytes (288) per bucket. A profile over the bound is an
// overflow (StatusOverflow): that read is not made, and the bound doubles
// for the next one, up to BoundCeiling times n. Default DefaultMaxBuckets.
func WithMaxBuckets(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return optionErr("WithMaxBuckets", "bound must be at least 1, got %d", n)
		}
		c.maxBuckets = n
		return nil
	}
}

// WithTopK sets how many sites each top list holds, between 1 and MaxTopK.
// Default DefaultTopK.
func WithTopK(k int) Option {
	return func(c *config) error {
		if k < 1 || k > MaxTopK {
			return optionErr("WithTopK", "k must be between 1 and %d, got %d", MaxTopK, k)
		}
		c.topK = k
		return nil
	}
}

// WithGrowing sets when a site is growing: its in-use bytes grew in each
// of the latest windows (at least 1) and by at least bytes (> 0) over
// them. Defaults DefaultGrowingWindows and DefaultGrowingBytes.
func WithGrowing(windows int, bytes int64) Option {
	return func(c *config) error {
		if windows < 1 {
			return optionErr("WithGrowing", "windows must be at least 1, got %d", windows)
		}
		if bytes <= 0 {
			return optionErr("WithGrowing", "bytes must be > 0, got %d", bytes)
		}
		c.growingWindows, c.growingBytes = windows, bytes
		return nil
	}
}

// WithClock makes the profiler read the time from now (for Snapshot.Time
// and the window's length) instead of time.Now.
func WithClock(now func() time.Time) Option {
	return func(c *config) error {
		if now == nil {
			return optionErr("WithClock", "clock must not be nil")
		}
		c.now = now
		return nil
	}
}

// MaxSignatures bounds WithSignatures: a bucket's matches are a 32-bit
// mask.
const MaxSignatures = 32

// WithSignatures makes the profiler sum, per signature, what the matching
// stacks allocated and hold (Snapshot.Signatures, in this order). A stack
// counts toward every signature it matches. Calls add up; in all, the
// signatures must have names, distinct, and frames, none empty, and be at
// most MaxSignatures. A signature given again, with the same name and
// frames, counts once (the probe adds OperatorSignatures itself in a
// binary that links client-go, and a user may too). A stack's matches are found once, when the stack is
// first seen, by symbolizing it; a read then only adds.
func WithSignatures(sigs ...Signature) Option {
	sigs = append([]Signature(nil), sigs...)
	for i := range sigs {
		sigs[i].Frames = append([]string(nil), sigs[i].Frames...) // the caller's slices stay the caller's
	}
	return func(c *config) error {
		all := c.sigs[:len(c.sigs):len(c.sigs)]
		for _, s := range sigs {
			if !slices.ContainsFunc(all, func(o Signature) bool { return o.Name == s.Name && slices.Equal(o.Frames, s.Frames) }) {
				all = append(all, s)
			}
		}
		if len(all) > MaxSignatures {
			return optionErr("WithSignatures", "at most %d signatures, got %d", MaxSignatures, len(all))
		}
		names := make(map[string]bool, len(all))
		for i, s := range all {
			switch {
			case s.Name == "":
				return optionErr("WithSignatures", "signature %d has no name", i)
			case names[s.Name]:
				return optionErr("WithSignatures", "two signatures are named %q", s.Name)
			case len(s.Frames) == 0:
				return optionErr("WithSignatures", "signature %q has no frames", s.Name)
			}
			for j, f := range s.Frames {
				if f == "" {
					return optionErr("WithSignatures", "signature %q: frame %d is empty", s.Name, j)
				}
			}
			names[s.Name] = true
		}
		c.sigs = all
		return nil
	}
}
