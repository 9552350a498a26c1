package tracing

import (
	"strings"
	"testing"
	"time"
)

func TestOptionErrors(t *testing.T) {
	tests := []struct {
		name string
		give Option
		want string
	}{
		{"nil option", nil, "tracing: New: nil Option"},
		{"nil provider", WithTracerProvider(nil), "WithTracerProvider"},
		{"nil watcher", WithWatcher(nil), "WithWatcher"},
		{"nil sampler", WithSampler(nil), "WithSampler"},
		{"nil pause source", WithPauseSource(nil), "WithPauseSource"},
		{"zero leak interval", WithLeakReportInterval(0), "WithLeakReportInterval"},
		{"negative leak interval", WithLeakReportInterval(-time.Second), "WithLeakReportInterval"},
		{"zero pause poll", WithPausePollInterval(0), "WithPausePollInterval"},
		{"zero top k", WithTopK(0), "WithTopK"},
		{"negative threshold", WithPauseThreshold(-1), "WithPauseThreshold"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := New(tt.give)
			if err == nil || r != nil {
				t.Fatalf("New = %v, %v; want an error", r, err)
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "tracing: ") {
				t.Errorf("error %q does not name %s", err, tt.want)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	r, err := New()
	if err != nil {
		t.Fatal(err)
	}
	c := r.cfg
	if c.provider == nil || c.watcher == nil || c.sampler != nil || c.pauses != nil {
		t.Errorf("defaults: %+v", c)
	}
	if c.leakInterval != time.Minute || c.topK != 10 || c.pauseThreshold != 10*time.Millisecond ||
		c.pauseInterval != time.Second {
		t.Errorf("defaults: %+v", c)
	}
	if DefaultPauseThreshold != 10*time.Millisecond || DefaultTopK != 10 || DefaultLeakReportInterval != time.Minute {
		t.Error("exported defaults changed")
	}
}
