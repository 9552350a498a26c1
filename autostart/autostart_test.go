package autostart

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	probe "github.com/gcprobe/probe"
	"github.com/gcprobe/probe/internal/testkit"
	"github.com/gcprobe/probe/memstats"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// env is a getenv over a map.
func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// records decodes the JSON lines written to b.
func records(t *testing.T, b *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(b.Bytes()))
	for sc.Scan() {
		var r map[string]any
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("not a JSON line: %q: %v", sc.Text(), err)
		}
		out = append(out, r)
	}
	return out
}

// TestNothingWithoutListen: this test binary has no GCPROBE_LISTEN, so the
// package's init started nothing.
func TestNothingWithoutListen(t *testing.T) {
	if Probe() != nil {
		t.Fatal("a probe was started without " + EnvListen)
	}
}

// TestStartServesAndLogsJSON: GCPROBE_LISTEN starts a probe that serves
// its page there and logs its start as a JSON line at level INFO; a
// detector event arrives at level WARN.
func TestStartServesAndLogsJSON(t *testing.T) {
	var stderr testkit.SyncBuffer
	p, err := start(env(map[string]string{
		EnvListen: "127.0.0.1:0",
		EnvTopK:   "3",
	}), &stderr, probe.WithSamplerOptions(memstats.WithForcedGC(0.001), memstats.WithCauseHysteresis(0, 0))) // one forced cycle fires forced_gc, at once
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	resp, err := http.Get("http://" + p.Addr().String() + "/debug/gcprobe/")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("the page: %s", resp.Status)
	}
	http.DefaultClient.CloseIdleConnections()
	var started, warned bool
	testkit.AwaitGC(t, 10*time.Second, "an INFO start line with the address and a WARN line on forced_gc", func() bool {
		for _, r := range records(t, bytes.NewBufferString(stderr.String())) {
			msg, _ := r["msg"].(string)
			switch {
			case strings.HasPrefix(msg, "gcprobe: started"):
				started = r["level"] == "INFO" && r["addr"] == p.Addr().String()
			case msg == "gcprobe: detector firing" && r["detector"] == "forced_gc":
				warned = r["level"] == "WARN"
			}
		}
		return started && warned
	})
}

// TestBadVariableIsNamed: a value the probe cannot take is an ERROR line
// naming the variable, and no probe; nothing panics.
func TestBadVariableIsNamed(t *testing.T) {
	for _, tt := range []struct {
		vars map[string]string
		name string
	}{
		{map[string]string{EnvListen: "127.0.0.1:0", EnvTopK: "ten"}, EnvTopK},
		{map[string]string{EnvListen: "127.0.0.1:0", EnvTopK: "-2"}, EnvTopK},
		{map[string]string{EnvListen: "0.0.0.0:9464"}, EnvListen},
		{map[string]string{EnvListen: "nohost"}, EnvListen},
		{map[string]string{EnvListen: "127.0.0.1:0", EnvUnauthenticated: "maybe"}, EnvUnauthenticated},
		{map[string]string{EnvListen: "127.0.0.1:0", EnvInterval: "5"}, EnvInterval},
		{map[string]string{EnvListen: "127.0.0.1:0", EnvInterval: "-1s"}, EnvInterval},
		{map[string]string{EnvListen: "127.0.0.1:0", EnvSuspectAge: "soon"}, EnvSuspectAge},
		{map[string]string{EnvListen: "127.0.0.1:0", EnvReadMemStats: "yes please"}, EnvReadMemStats},
		{map[string]string{EnvListen: "127.0.0.1:0", EnvMetrics: "both"}, EnvMetrics},
		{map[string]string{EnvListen: "127.0.0.1:0", EnvLogLevel: "loud"}, EnvLogLevel},
		{map[string]string{EnvListen: "127.0.0.1:0", EnvLogFormat: "xml"}, EnvLogFormat},
	} {
		var stderr bytes.Buffer
		p, err := start(env(tt.vars), &stderr)
		if p != nil {
			p.Stop()
			t.Errorf("%v: a probe started", tt.vars)
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.name) {
			t.Errorf("%v: error %v does not name %s", tt.vars, err, tt.name)
		}
		rs := records(t, &stderr)
		if len(rs) != 1 || rs[0]["level"] != "ERROR" || !strings.Contains(rs[0]["msg"].(string), tt.name) {
			t.Errorf("%v: want one ERROR line naming %s, got:\n%s", tt.vars, tt.name, stderr.String())
		}
	}
}

// TestLogOffAndText: GCPROBE_LOG_LEVEL=off writes nothing, even on a
// refusal; GCPROBE_LOG_FORMAT=text writes slog's text form with a level.
func TestLogOffAndText(t *testing.T) {
	var stderr bytes.Buffer
	if p, _ := start(env(map[string]string{EnvListen: "127.0.0.1:0", EnvLogLevel: "off", EnvTopK: "x"}), &stderr); p != nil {
		p.Stop()
	}
	if stderr.Len() != 0 {
		t.Errorf("logging off wrote %q", stderr.String())
	}
	p, err := start(env(map[string]string{EnvListen: "none", EnvLogFormat: "text"}), &stderr)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	if p.Addr() != nil {
		t.Errorf("GCPROBE_LISTEN=none listens on %v", p.Addr())
	}
	if !strings.HasPrefix(stderr.String(), "time=") || !strings.Contains(stderr.String(), "level=INFO") {
		t.Errorf("text format: %q", stderr.String())
	}
}

// TestMetricsRegistry: by default the probe's collector goes on a registry
// of its own and the program's default registry is left alone;
// GCPROBE_METRICS=default registers it there.
func TestMetricsRegistry(t *testing.T) {
	has := func() bool {
		mfs, err := prometheus.DefaultGatherer.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if strings.HasPrefix(mf.GetName(), "gcprobe_") {
				return true
			}
		}
		return false
	}
	for _, tt := range []struct {
		value string
		want  bool
	}{{"", false}, {"own", false}, {"default", true}} {
		p, err := start(env(map[string]string{EnvListen: "none", EnvMetrics: tt.value, EnvLogLevel: "off"}), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		got := has()
		p.Stop()
		if got != tt.want {
			t.Errorf("%s=%q: the default registry has gcprobe's series: %v, want %v", EnvMetrics, tt.value, got, tt.want)
		}
	}
}
