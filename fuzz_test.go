package probe_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gcprobe/probe"
)

// Whatever the option values, New returns a probe or an error naming the
// option (the root's, or the package's it forwards to); it never panics.
func FuzzOptions(f *testing.F) {
	f.Add(int64(time.Second), 10, "127.0.0.1:0")
	f.Add(int64(0), 0, "")
	f.Add(int64(-1), -5, ":::")
	f.Add(int64(time.Millisecond), 1000, "localhost:http")
	f.Fuzz(func(t *testing.T, interval int64, topK int, addr string) {
		p, err := probe.New(
			probe.WithRegisterer(prometheus.NewRegistry()),
			probe.WithInterval(time.Duration(interval)),
			probe.WithTopK(topK),
			probe.WithListenAddr(addr),
		)
		if err != nil {
			if p != nil || !strings.HasPrefix(err.Error(), "probe: ") || !strings.Contains(err.Error(), ": With") {
				t.Fatalf("New: %v, %q", p, err)
			}
			return
		}
		if p == nil {
			t.Fatal("New returned neither a probe nor an error")
		}
		// New does not listen: only Start does.
		if err := p.Stop(); err != nil {
			t.Fatal(err)
		}
	})
}
