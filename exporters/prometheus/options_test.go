package promexporter

import (
	"strings"
	"testing"

	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/memstats"
)

func TestNewOptions(t *testing.T) {
	w, err := finalizerwatch.New()
	if err != nil {
		t.Fatal(err)
	}
	s, err := memstats.New()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		give    []Option
		wantErr string // "" for success
	}{
		{name: "defaults"},
		{name: "all", give: []Option{WithWatcher(w), WithTopK(1), WithSampler(s)}},
		{name: "separate runtime options", give: []Option{
			WithSnapshotFunc(s.Snapshot),
			WithDetectors(func(func(string, bool) bool) {}),
			WithOwnCallbacksFunc(func(finalizerwatch.Kind) uint64 { return 0 }),
		}},
		{name: "nil funcs omit their series", give: []Option{WithSnapshotFunc(nil), WithDetectors(nil), WithOwnCallbacksFunc(nil)}},
		{name: "top k zero", give: []Option{WithTopK(0)}, wantErr: "WithTopK: must be >= 1, got 0"},
		{name: "top k negative", give: []Option{WithTopK(-3)}, wantErr: "WithTopK: must be >= 1, got -3"},
		{name: "nil watcher", give: []Option{WithWatcher(nil)}, wantErr: "WithWatcher: nil Watcher"},
		{name: "nil sampler", give: []Option{WithSampler(nil)}, wantErr: "WithSampler: nil Sampler"},
		{name: "nil option", give: []Option{nil}, wantErr: "promexporter: New: nil Option"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(tt.give...)
			if tt.wantErr == "" {
				if err != nil || c == nil {
					t.Fatalf("New() = %v, %v; want a Collector", c, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.HasPrefix(err.Error(), "promexporter: ") {
				t.Fatalf("New() error = %v, want one containing %q", err, tt.wantErr)
			}
			if c != nil {
				t.Errorf("New() returned a Collector with an error")
			}
		})
	}
}

func TestNewDefaults(t *testing.T) {
	c := newCollector(t)
	if c.cfg.watcher != finalizerwatch.Default {
		t.Error("default watcher is not finalizerwatch.Default")
	}
	if c.cfg.topK != DefaultTopK {
		t.Errorf("default K = %d, want %d", c.cfg.topK, DefaultTopK)
	}
	if c.cfg.snapshot != nil || c.cfg.detectors != nil || c.cfg.own != nil {
		t.Error("runtime sources set by default")
	}
}
