package finalizertest

import (
	"strings"
	"testing"
	"time"
)

func TestOptionsAreValidated(t *testing.T) {
	w := newWatcher(t)
	other := newWatcher(t)
	tests := []struct {
		name string
		give []Option
		want string // in the error; "" for valid options
	}{
		{name: "defaults"},
		{name: "cycles 1", give: []Option{WithCycles(1)}},
		{name: "cycles max", give: []Option{WithCycles(MaxCycles)}},
		{name: "cycles 0", give: []Option{WithCycles(0)}, want: "WithCycles: must be in [1, 16], got 0"},
		{name: "cycles too many", give: []Option{WithCycles(MaxCycles + 1)}, want: "WithCycles: must be in [1, 16], got 17"},
		{name: "deadline 0", give: []Option{WithDeadline(0)}, want: "WithDeadline: must be > 0, got 0s"},
		{name: "deadline negative", give: []Option{WithDeadline(-time.Second)}, want: "WithDeadline: must be > 0, got -1s"},
		{name: "nil watcher", give: []Option{WithWatcher(nil)}, want: "WithWatcher: nil Watcher"},
		{name: "empty site", give: []Option{IgnoreSite("")}, want: "IgnoreSite: empty string"},
		{name: "empty function", give: []Option{IgnoreFunction("")}, want: "IgnoreFunction: empty function name"},
		{name: "nil option", give: []Option{WithCycles(2), nil}, want: "finalizertest: Find: nil Option"},
		{name: "baseline of nil", give: []Option{IgnoreCurrentOf(nil)}, want: "IgnoreCurrentOf: nil Watcher"},
		{name: "baseline of watcher", give: []Option{IgnoreCurrentOf(w), WithWatcher(w)}},
		{name: "baseline before watcher", give: []Option{WithWatcher(w), IgnoreCurrentOf(w)}},
		{name: "baseline of another watcher", give: []Option{WithWatcher(w), IgnoreCurrentOf(other)}, want: "IgnoreCurrent: the baseline was taken of a different Watcher"},
		{name: "baseline of Default, watcher w", give: []Option{IgnoreCurrent(), WithWatcher(w)}, want: "with WithWatcher(w) use IgnoreCurrentOf(w)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := buildConfig(tt.give)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("buildConfig: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("buildConfig error %v, want one containing %q", err, tt.want)
			}
			// Find and VerifyNone say the same, without forcing any GC.
			before := forcedGCs()
			if err := Find(tt.give...); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Find error %v, want one containing %q", err, tt.want)
			}
			ft := &fakeT{}
			VerifyNone(ft, tt.give...)
			if len(ft.errors) != 1 || !strings.Contains(ft.errors[0], tt.want) {
				t.Errorf("VerifyNone reported %q, want one error containing %q", ft.errors, tt.want)
			}
			if n := forcedGCs() - before; n != 0 {
				t.Errorf("%d GC cycles forced for invalid options", n)
			}
		})
	}
}

func TestOptionDefaults(t *testing.T) {
	c, err := buildConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.cycles != DefaultCycles || c.deadline != DefaultDeadline || c.baseline != nil || len(c.ignores) != 0 {
		t.Errorf("defaults: %+v", c)
	}
	// Later options win.
	c, err = buildConfig([]Option{WithCycles(5), WithCycles(7), WithDeadline(time.Second), WithDeadline(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if c.cycles != 7 || c.deadline != time.Minute {
		t.Errorf("cycles %d deadline %v, want 7 and 1m", c.cycles, c.deadline)
	}
}
