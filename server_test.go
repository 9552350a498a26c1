package probe_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gcprobe/probe"
	pprofexporter "github.com/gcprobe/probe/exporters/pprof"
	"github.com/gcprobe/probe/internal/testkit"
)

// rawScrape sends GET /metrics on c (keep-alive) and reads the answer.
func rawScrape(c net.Conn, br *bufio.Reader) (*http.Response, error) {
	if _, err := io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: probe\r\n\r\n"); err != nil {
		return nil, err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return nil, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp, err
}

// Issue 12, item 9: the listener held 2 000 idle keep-alive connections
// (2 004 goroutines). Now an idle connection is closed within
// ListenerIdleTimeout, at most MaxListenerConns are open at once however
// many clients connect, the goroutines stay bounded with them, and every
// scrape still gets its answer.
func TestListenerBoundsConnections(t *testing.T) {
	p, addr := startListening(t)
	dial := func() net.Conn {
		c, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}

	t.Run("idle connections are closed", func(t *testing.T) {
		// A few clients, well under the cap: their connections are kept
		// alive, then closed by the server once idle.
		const n = 4
		type idle struct {
			c     net.Conn
			br    *bufio.Reader
			since time.Time
		}
		var conns []idle
		for range n {
			c := dial()
			br := bufio.NewReader(c)
			resp, err := rawScrape(c, br)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("scrape: %v, %v", resp, err)
			}
			if resp.Close {
				t.Fatal("a lone client's connection was not kept alive: nothing to test")
			}
			conns = append(conns, idle{c, br, time.Now()})
		}
		for _, ic := range conns {
			// The read ends with EOF when the server closes the
			// connection; the deadline only bounds the wait.
			ic.c.SetReadDeadline(ic.since.Add(probe.ListenerIdleTimeout + 5*time.Second))
			_, err := ic.br.ReadByte()
			took := time.Since(ic.since)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("an idle connection was still open %v after its last response (idle timeout %v)", took, probe.ListenerIdleTimeout)
			}
			if !errors.Is(err, io.EOF) {
				t.Fatalf("reading an idle connection: %v", err)
			}
			t.Logf("idle connection closed by the server after %v", took.Round(time.Millisecond))
		}
		testkit.Poll(t, 10*time.Second, "the listener to hold no connection", func() bool { return p.OpenConns() == 0 })
	})

	t.Run("connections beyond the cap wait", func(t *testing.T) {
		const clients = 8 * probe.MaxListenerConns
		runtime.GC()
		base := runtime.NumGoroutine()
		// Sample the open connections and goroutines while the clients
		// come and go.
		var maxConns, maxGoroutines atomic.Int64
		stop := make(chan struct{})
		sampled := make(chan struct{})
		go func() {
			defer close(sampled)
			for {
				if n := int64(p.OpenConns()); n > maxConns.Load() {
					maxConns.Store(n)
				}
				if n := int64(runtime.NumGoroutine()); n > maxGoroutines.Load() {
					maxGoroutines.Store(n)
				}
				select {
				case <-stop:
					return
				case <-time.After(time.Millisecond): // sampling interval
				}
			}
		}()
		// Every client connects and asks at once (the kernel completes
		// the connections the listener has not accepted yet); then they
		// read their answers in turn, keeping their connections open.
		conns := make([]net.Conn, clients)
		for i := range conns {
			conns[i] = dial()
			if _, err := io.WriteString(conns[i], "GET /metrics HTTP/1.1\r\nHost: probe\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
		}
		closed := 0
		for i, c := range conns {
			c.SetReadDeadline(time.Now().Add(30 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("client %d of %d: no answer: %v", i, clients, err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("client %d: %s", i, resp.Status)
			}
			if resp.Close {
				closed++
			}
		}
		close(stop)
		<-sampled
		t.Logf("%d clients: at most %d connections open, goroutines %d → at most %d; %d answers closed their connection",
			clients, maxConns.Load(), base, maxGoroutines.Load(), closed)
		if m := maxConns.Load(); m > probe.MaxListenerConns {
			t.Errorf("%d connections open at once, cap %d", m, probe.MaxListenerConns)
		}
		// Per open connection, its goroutine and, while a request is
		// in, a background reader; per running scrape (at most 8), a
		// few more (promhttp's timeout handler, the registry's
		// collectors). Without the cap every client held at least one.
		if grown := maxGoroutines.Load() - int64(base); grown > 4*probe.MaxListenerConns {
			t.Errorf("goroutines grew by %d with %d clients; the cap is %d connections", grown, clients, probe.MaxListenerConns)
		}
		// Past half the cap, answers close their connections: proof
		// that the clients did crowd the listener.
		if closed == 0 {
			t.Error("no answer closed its connection although the listener was full")
		}
		// A client of the usual kind still gets its scrape.
		resp, err := (&http.Client{Timeout: 30 * time.Second}).Get("http://" + addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("scrape after the flood: %s", resp.Status)
		}
	})
}

// Issue 26, item 1: clients that connect, send nothing and reconnect when
// closed held every place of the listener for the read-header timeout,
// and a scrape waited behind them in the accept queue: 5–9 s with 64 such
// clients, about 30 s with 256, past Prometheus's 10 s scrape timeout.
// With 256 of them connected, scrapes on fresh connections are answered
// promptly, and the listener still holds at most MaxListenerConns.
//
// It runs twice: as the listener is on Linux, where the kernel holds back
// connections that have sent nothing (TCP_DEFER_ACCEPT), and with the
// listener's eviction alone, as on other systems.
func TestSilentClientsDoNotStarveScrapes(t *testing.T) {
	t.Run("deferred accept", func(t *testing.T) { silentClientsScrape(t, true) })
	t.Run("eviction alone", func(t *testing.T) { silentClientsScrape(t, false) })
}

func silentClientsScrape(t *testing.T, deferAccept bool) {
	defer probe.SetDeferAccept(deferAccept)()
	// Each client connects, sends nothing, waits for the server to close
	// the connection and connects again. The bound is well under
	// Prometheus's default 10 s scrape timeout, and generous for a busy
	// machine running the race detector: by eviction alone the listener
	// turns its places over every 250 ms (scrapes take about 2 s); with
	// the deferred accept, milliseconds.
	scrapeUnderAttack(t, attack{clients: 256, full: true, bound: 5 * time.Second})
}

// A request with a body is refused (413) at once and its connection closed
// without reading the body: the listener's paths take none. net/http read
// up to 256 KiB of it first, until the read timeout (10 s) for a client
// that sends it slowly, holding the connection's place all along.
func TestListenerRefusesRequestWithBodyAtOnce(t *testing.T) {
	p, _ := startListening(t)
	// Well under the listener's 10 s read timeout, and generous for a
	// busy machine.
	const bound = 3 * time.Second
	tests := []struct {
		name string
		give string // the request, whose body never comes
	}{
		{"declared length", "GET /metrics HTTP/1.1\r\nHost: probe\r\nContent-Length: 200000\r\n\r\n"},
		{"declared length past 256 KiB", "GET /metrics HTTP/1.1\r\nHost: probe\r\nContent-Length: 1000000\r\n\r\n"},
		{"chunked", "GET /metrics HTTP/1.1\r\nHost: probe\r\nTransfer-Encoding: chunked\r\n\r\n"},
		{"HEAD", "HEAD /metrics HTTP/1.1\r\nHost: probe\r\nContent-Length: 10\r\n\r\n"},
		{"unknown path", "GET /nothing HTTP/1.1\r\nHost: probe\r\nContent-Length: 10\r\n\r\n"},
		{"POST", "POST /metrics HTTP/1.1\r\nHost: probe\r\nContent-Length: 10\r\n\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := net.DialTimeout("tcp", p.Addr().String(), 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			start := time.Now()
			c.SetDeadline(start.Add(30 * time.Second)) // bounds the test, whatever happens
			if _, err := io.WriteString(c, tt.give); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(c)
			req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(tt.give)))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(br, req)
			if err != nil {
				t.Fatalf("no answer after %v: %v", time.Since(start).Round(time.Millisecond), err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			answered := time.Since(start)
			if resp.StatusCode != http.StatusRequestEntityTooLarge {
				t.Errorf("%s, want %d", resp.Status, http.StatusRequestEntityTooLarge)
			}
			if !resp.Close {
				t.Errorf("%s, keeping the connection open; want it closed", resp.Status)
			}
			// The server closes the connection (EOF, or a reset since
			// the body's bytes are unread).
			if _, err := br.ReadByte(); errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatal("the connection was still open 30 s after the request")
			}
			closed := time.Since(start)
			t.Logf("%s after %v, closed after %v", resp.Status, answered.Round(time.Millisecond), closed.Round(time.Millisecond))
			if closed > bound {
				t.Errorf("answered after %v and closed after %v, want both under %v", answered.Round(time.Millisecond), closed.Round(time.Millisecond), bound)
			}
		})
	}
}

// sampleOpenConns samples p's open connections every millisecond until
// ctx is done, then closes sampled; max is the most it saw.
func sampleOpenConns(ctx context.Context, p *probe.Probe) (max *atomic.Int64, sampled <-chan struct{}) {
	max = new(atomic.Int64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if n := int64(p.OpenConns()); n > max.Load() {
				max.Store(n)
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Millisecond): // sampling interval
			}
		}
	}()
	return max, done
}

// attack is how each of an attack's clients uses its connection: it sends
// first, then next every every (never, if every is 0), reading what the
// server answers, until the server closes the connection; then it
// connects again.
type attack struct {
	clients int
	first   string
	next    string
	every   time.Duration
	// full waits, before the scrapes, for the clients to fill the
	// listener (MaxListenerConns places), as silent clients do.
	full bool
	// bound is what a scrape may take while the attack goes on; 0 is
	// 2 s, well under Prometheus's default 10 s scrape timeout.
	bound time.Duration
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
	const scrapes = 5
	bound := a.bound
	if bound == 0 {
		bound = 2 * time.Second
	}
	p, addr := startListening(t)

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

	testkit.Poll(t, 30*time.Second, "every attacking client to connect and send (and fill the listener, if full)", func() bool {
		return connects.Load() >= int64(a.clients) && (!a.full || p.OpenConns() == probe.MaxListenerConns)
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
	p, _ := startListening(t)
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
	p, _ := startListening(t)
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
	p, _ := startListening(t)
	code, body := getDelta(t, "http://"+p.Addr().String()+probe.ProfilePath+"?seconds=11")
	if code != http.StatusOK {
		t.Fatalf("?seconds=11: %d %s", code, body)
	}
	http.DefaultClient.CloseIdleConnections()
}

// startListening starts a probe with a watcher of its own that serves on
// a loopback port of its own (WithListenAddr), stopped when the test ends,
// and returns it and its address.
func startListening(t *testing.T) (*probe.Probe, string) {
	t.Helper()
	p, err := probe.Start(probe.WithRegisterer(prometheus.NewRegistry()), probe.WithWatcher(newWatcher(t)),
		probe.WithListenAddr("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop() })
	return p, p.Addr().String()
}
