package probe_test

import (
	"bytes"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gcprobe/probe"
	pprofexporter "github.com/gcprobe/probe/exporters/pprof"
	"github.com/gcprobe/probe/internal/testkit"
)

// getDelta GETs url and returns the status and body.
func getDelta(t *testing.T, url string) (int, []byte) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, body
}

// The listener serves both profiles' deltas, and refuses seconds that
// are not below its write timeout.
func TestListenerServesDeltas(t *testing.T) {
	p, err := probe.Start(probe.WithRegisterer(prometheus.NewRegistry()), probe.WithWatcher(newWatcher(t)),
		probe.WithListenAddr("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	base := "http://" + p.Addr().String()
	if probe.ProfilePath != pprofexporter.FinalizersPath || probe.AllocsProfilePath != pprofexporter.AllocsPath {
		t.Fatalf("the probe's paths %s, %s are not pprofexporter's", probe.ProfilePath, probe.AllocsProfilePath)
	}
	for _, path := range []string{probe.ProfilePath, probe.AllocsProfilePath} {
		code, body := getDelta(t, base+path+"?seconds=1")
		if code != http.StatusOK {
			t.Fatalf("%s?seconds=1: %d %s", path, code, body)
		}
		prof, err := profile.Parse(bytes.NewReader(body))
		if err != nil {
			t.Fatalf("%s?seconds=1: %v", path, err)
		}
		if err := prof.CheckValid(); err != nil || prof.DurationNanos != time.Second.Nanoseconds() {
			t.Errorf("%s?seconds=1: valid %v, duration %d", path, err, prof.DurationNanos)
		}
		code, body = getDelta(t, base+path+"?seconds=30")
		if code != http.StatusBadRequest || !strings.Contains(string(body), "WriteTimeout of 30s") {
			t.Errorf("%s?seconds=30: %d %s, want 400 naming the write timeout", path, code, body)
		}
	}
}

// Stop ends a delta that waits, at once, with 503: it does not wait for
// the delta's seconds.
func TestStopEndsDelta(t *testing.T) {
	p, err := probe.Start(probe.WithRegisterer(prometheus.NewRegistry()), probe.WithWatcher(newWatcher(t)),
		probe.WithListenAddr("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	type answer struct {
		code int
		body string
	}
	done := make(chan answer, 1)
	go func() {
		res, err := http.Get("http://" + p.Addr().String() + probe.ProfilePath + "?seconds=25")
		if err != nil {
			done <- answer{body: err.Error()}
			return
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		done <- answer{res.StatusCode, string(b)}
	}()
	testkit.Poll(t, 10*time.Second, "the delta to wait", func() bool {
		buf := make([]byte, 1<<20)
		return bytes.Contains(buf[:runtime.Stack(buf, true)], []byte("exporters/pprof.(*handler).serveDelta"))
	})
	at := time.Now()
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(at); d > 3*time.Second {
		t.Errorf("Stop took %v with a delta waiting", d)
	}
	select {
	case a := <-done:
		if a.code != http.StatusServiceUnavailable || !strings.Contains(a.body, "stopping") {
			t.Errorf("the waiting delta answered %d %q, want 503 saying the probe stops", a.code, a.body)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the delta still waits after Stop")
	}
	http.DefaultClient.CloseIdleConnections()
}

// A delta longer than the listener's read timeout (10 s) is served:
// continuous profilers ask for their scrape interval less a second, 14 s
// by default for Grafana Alloy.
func TestDeltaOutlastsReadTimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("waits 11 s")
	}
	p, err := probe.Start(probe.WithRegisterer(prometheus.NewRegistry()), probe.WithWatcher(newWatcher(t)),
		probe.WithListenAddr("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	code, body := getDelta(t, "http://"+p.Addr().String()+probe.ProfilePath+"?seconds=11")
	if code != http.StatusOK {
		t.Fatalf("?seconds=11: %d %s", code, body)
	}
	http.DefaultClient.CloseIdleConnections()
}
