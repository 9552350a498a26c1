package probe_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gcprobe/probe"
	"github.com/gcprobe/probe/internal/testkit"
)

// attack is how each of an attack's clients uses its connection: it sends
// first, then next every every (never, if every is 0), reading what the
// server answers, until the server closes the connection; then it
// connects again.
type attack struct {
	clients int
	first   string
	next    string
	every   time.Duration
}

// Clients that hold the listener's places without completing a request
// delayed every scrape by seconds:
//
//   - slow body: a complete GET /metrics header with Content-Length:
//     200000, then a byte a second. net/http read the body before
//     answering, until the 10 s read timeout, and its connection, being
//     active, was never evicted: scrapes waited up to 17 s with 64 clients.
//   - slowloris: a header trickled a byte at a time. Each place was held
//     for the header grace (1 s) and a scrape queued behind 200 such
//     clients in the kernel's accept queue for 5 s.
//   - one byte: "G" and nothing more, which gets past TCP_DEFER_ACCEPT:
//     with 300 such clients a scrape took 6 s.
//
// With each attack going on, a scrape on a fresh connection is answered
// within 2 s, and the listener holds at most MaxListenerConns.
func TestListenerUnderAttack(t *testing.T) {
	tests := []struct {
		name string
		give attack
	}{
		{"slow body", attack{
			clients: 64,
			first:   "GET /metrics HTTP/1.1\r\nHost: probe\r\nContent-Length: 200000\r\n\r\n",
			next:    "a",
			every:   time.Second,
		}},
		{"slowloris", attack{
			clients: 200,
			first:   "GET /metrics HTTP/1.1\r\nHost: probe\r\nX-Slow: ",
			next:    "a",
			every:   100 * time.Millisecond,
		}},
		{"one byte", attack{
			clients: 300,
			first:   "G",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { scrapeUnderAttack(t, tt.give) })
	}
}

func scrapeUnderAttack(t *testing.T, a attack) {
	const (
		scrapes = 5
		// What a scrape may take while the attack goes on: well under
		// Prometheus's default 10 s scrape timeout.
		bound = 2 * time.Second
	)
	p, err := probe.Start(probe.WithRegisterer(prometheus.NewRegistry()), probe.WithWatcher(newWatcher(t)),
		probe.WithListenAddr("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	addr := p.Addr().String()

	// The attackers run until the test ends them (60 s at most,
	// whatever happens).
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var connects atomic.Int64
	for range a.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var d net.Dialer
			for ctx.Err() == nil {
				c, err := d.DialContext(ctx, "tcp", addr)
				if err != nil {
					select { // the accept queue may be full: pace the retry
					case <-ctx.Done():
					case <-time.After(10 * time.Millisecond):
					}
					continue
				}
				a.run(ctx, c, &connects)
				c.Close()
			}
		}()
	}
	stopAttack := func() {
		cancel()
		wg.Wait()
	}
	defer stopAttack()

	// Sample the open connections while the attack goes on.
	maxConns, sampled := sampleOpenConns(ctx, p)

	testkit.Poll(t, 30*time.Second, "every attacking client to connect and send", func() bool {
		return connects.Load() >= int64(a.clients)
	})

	client := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	defer client.CloseIdleConnections()
	var took []time.Duration
	for i := range scrapes {
		start := time.Now()
		resp, err := client.Get("http://" + addr + "/metrics")
		d := time.Since(start)
		if err != nil {
			t.Fatalf("scrape %d with %d attacking clients: %v after %v (earlier scrapes: %v)", i, a.clients, err, d.Round(time.Millisecond), took)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("scrape %d: %s", i, resp.Status)
		}
		took = append(took, d)
		if d > bound {
			// One is enough: the others would only make the test longer.
			t.Fatalf("scrape %d took %v with %d attacking clients, want under %v (scrapes: %v)", i, d.Round(time.Millisecond), a.clients, bound, took)
		}
	}
	made := connects.Load()
	stopAttack()
	<-sampled
	t.Logf("%d attacking clients (%d connections made): scrapes took %v; at most %d connections open",
		a.clients, made, took, maxConns.Load())
	if m := maxConns.Load(); m > probe.MaxListenerConns {
		t.Errorf("%d connections open at once, cap %d", m, probe.MaxListenerConns)
	}
}

// run is one attacking client on connection c: it counts the connection
// once its first bytes are sent, and returns when the server closes c or
// ctx ends.
func (a attack) run(ctx context.Context, c net.Conn, connects *atomic.Int64) {
	unhook := context.AfterFunc(ctx, func() { c.Close() })
	defer unhook()
	if _, err := io.WriteString(c, a.first); err != nil {
		return
	}
	connects.Add(1)
	buf := make([]byte, 512)
	for {
		if a.every > 0 {
			// The read's deadline paces what the client sends.
			c.SetReadDeadline(time.Now().Add(a.every))
		}
		_, err := c.Read(buf)
		switch {
		case err == nil:
			// An answer: read on until the server closes.
		case errors.Is(err, os.ErrDeadlineExceeded):
			if _, err := io.WriteString(c, a.next); err != nil {
				return
			}
		default:
			return
		}
	}
}
