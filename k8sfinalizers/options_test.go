package k8sfinalizers

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestOptions(t *testing.T) {
	cm := WithGVKs(configMaps)
	tests := []struct {
		name    string
		give    []Option
		wantErr string
	}{
		{"defaults", []Option{cm}, ""},
		{"no kinds", nil, "WithGVKs"},
		{"nil option", []Option{cm, nil}, "k8sfinalizers: New: nil Option"},
		{"kind without version", []Option{WithGVKs(schema.GroupVersionKind{Kind: "ConfigMap"})}, "WithGVKs"},
		{"kind without kind", []Option{WithGVKs(schema.GroupVersionKind{Version: "v1"})}, "WithGVKs"},
		{"stuck after 0", []Option{cm, WithStuckAfter(0)}, "WithStuckAfter"},
		{"check interval too short", []Option{cm, WithCheckInterval(time.Microsecond)}, "WithCheckInterval"},
		{"max names 0", []Option{cm, WithMaxFinalizerNames(0)}, "WithMaxFinalizerNames"},
		{"max names too many", []Option{cm, WithMaxFinalizerNames(1025)}, "WithMaxFinalizerNames"},
		{"max reports 0", []Option{cm, WithMaxReportsPerCheck(0)}, "WithMaxReportsPerCheck"},
		{"no buckets", []Option{cm, WithRemovalBuckets()}, "WithRemovalBuckets"},
		{"buckets not increasing", []Option{cm, WithRemovalBuckets(1, 1)}, "WithRemovalBuckets"},
		{"bucket not positive", []Option{cm, WithRemovalBuckets(0, 1)}, "WithRemovalBuckets"},
		{"bucket infinite", []Option{cm, WithRemovalBuckets(1, math.Inf(1))}, "WithRemovalBuckets"},
		{"nil logger", []Option{cm, WithLogger(nil)}, "WithLogger"},
		{"nil tracer provider", []Option{cm, WithTracerProvider(nil)}, "WithTracerProvider"},
		{"nil stuck func", []Option{cm, WithStuckFunc(nil)}, "WithStuckFunc"},
		{"nil clock", []Option{cm, WithClock(nil)}, "WithClock"},
		{"nil registerer", []Option{cm, WithRegisterer(nil)}, "WithRegisterer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, err := New(tt.give...)
			if tt.wantErr == "" {
				if err != nil || w == nil {
					t.Fatalf("New: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("New: got error %v, want one naming %q", err, tt.wantErr)
			}
		})
	}
}

func TestWithGVKsDeduplicates(t *testing.T) {
	w, err := New(WithGVKs(configMaps, widgets), WithGVKs(configMaps))
	if err != nil {
		t.Fatal(err)
	}
	if got := w.GVKs(); !slices.Equal(got, []schema.GroupVersionKind{configMaps, widgets}) {
		t.Errorf("GVKs: got %v", got)
	}
}

func TestWithRemovalBucketsCopies(t *testing.T) {
	b := []float64{1, 2}
	w, err := New(WithGVKs(configMaps), WithRemovalBuckets(b...))
	if err != nil {
		t.Fatal(err)
	}
	b[0] = 100
	if w.cfg.buckets[0] != 1 {
		t.Error("the watcher shares the caller's bucket slice")
	}
	d := DefaultRemovalBuckets()
	d[0] = 100
	if DefaultRemovalBuckets()[0] == 100 {
		t.Error("DefaultRemovalBuckets returns a shared slice")
	}
}

func TestGVKString(t *testing.T) {
	for _, tt := range []struct {
		give schema.GroupVersionKind
		want string
	}{
		{configMaps, "ConfigMap.v1"},
		{widgets, "Widget.v1alpha1.example.gcprobe.dev"},
	} {
		if got := gvkString(tt.give); got != tt.want {
			t.Errorf("gvkString(%v) = %q, want %q", tt.give, got, tt.want)
		}
	}
}
