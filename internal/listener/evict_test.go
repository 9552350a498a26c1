package listener

import (
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/gcprobe/probe/internal/testkit"
)

// Issue 26, item 14: under a CPU-bound load a scrape failed with EOF 1 time
// in 2 108: the listener, full, evicted a connection whose request the
// server had not yet read because its goroutine waited to be scheduled
// for longer than headerGrace. The listener judged the client by time in
// state alone. Now only a connection whose server waits for its client
// may be evicted, whatever the time. The clock is evictable's argument:
// each case is looked at long after every grace.
func TestEvictOnlyClientsTheServerWaitsFor(t *testing.T) {
	l := peekingListener(t)
	later := time.Now().Add(time.Minute)

	const request = "GET /metrics HTTP/1.1\r\nHost: probe\r\n\r\n"

	t.Run("a request the server has not read", func(t *testing.T) {
		c, _ := acceptSending(t, l, request)
		onlyOpen(l, c)
		if v, wait := l.evictable(later, false); v != nil || wait != recheckEvery {
			t.Fatalf("evicted: %t, look again in %v; want none evicted, look again in %v", v != nil, wait, recheckEvery)
		}
	})
	t.Run("a header the server is parsing", func(t *testing.T) {
		c, _ := acceptSending(t, l, request)
		onlyOpen(l, c)
		buf := make([]byte, len(request))
		if _, err := io.ReadFull(c, buf); err != nil {
			t.Fatal(err)
		}
		if v, _ := l.evictable(later, false); v != nil {
			t.Fatal("a connection whose header the server read, and has not served yet, was evicted")
		}
	})
	t.Run("a request the server took and has not noted", func(t *testing.T) {
		// The server's goroutine took the request's bytes and was
		// preempted before its Read returned: it shows as in Read, with
		// nothing left in the kernel, as the failing scrape did.
		if _, known := bytesReceived(loopbackConn(t)); !known {
			t.Skip("this system does not count a connection's received bytes")
		}
		c, _ := acceptSending(t, l, request)
		onlyOpen(l, c)
		buf := make([]byte, len(request))
		if _, err := io.ReadFull(c.Conn, buf); err != nil { // past the count
			t.Fatal(err)
		}
		c.reading.Store(true)
		if v, _ := l.evictable(later, false); v != nil {
			t.Fatal("a connection whose request the server took was evicted")
		}
	})
	t.Run("a client that sent nothing", func(t *testing.T) {
		c, _ := acceptSending(t, l, "")
		onlyOpen(l, c)
		if v, _ := l.evictable(later, false); v != c {
			t.Fatalf("evicted %p; want the silent connection %p", v, c)
		}
	})
	t.Run("a header that stopped coming", func(t *testing.T) {
		c, _ := acceptSending(t, l, "GET /metrics HTTP/1.1\r\n")
		onlyOpen(l, c)
		awaitRestOfHeader(t, c)
		if v, _ := l.evictable(later, false); v != c {
			t.Fatalf("evicted %p; want the connection whose header stopped, %p", v, c)
		}
	})
	t.Run("idle with a new request waiting", func(t *testing.T) {
		c, client := acceptSending(t, l, request)
		onlyOpen(l, c)
		buf := make([]byte, len(request))
		if _, err := io.ReadFull(c, buf); err != nil {
			t.Fatal(err)
		}
		l.ConnState(c, http.StateIdle)
		if _, err := io.WriteString(client, request); err != nil {
			t.Fatal(err)
		}
		testkit.Poll(t, 10*time.Second, "the second request to reach the server's kernel", func() bool {
			p, _ := peekSpoke(c.Conn)
			return p
		})
		c.reading.Store(true) // as if woken by the bytes and not yet scheduled
		if v, _ := l.evictable(later, false); v != nil {
			t.Fatal("an idle connection whose next request waits in the kernel was evicted")
		}
	})
}

// While a new connection waits to be accepted, a connection the server
// waits for gives its place sooner: a header trickled a byte at a time
// held it for headerGrace (1 s), and a scrape in the accept queue behind
// 200 such clients waited 5 s. A request the server has not read still
// keeps its place.
func TestEvictSoonerWhilePressed(t *testing.T) {
	l := peekingListener(t)
	tests := []struct {
		name        string
		give        string        // what the client sends
		grace       time.Duration // before it may be evicted; 0: never
		pressed     time.Duration // the same while another waits
		serverReads bool          // the server has read what it sent
	}{
		{"a client that sent nothing", "", evictGrace, pressGrace, false},
		{"a header that stopped coming", "G", headerGrace, pressHeaderGrace, true},
		{"a request the server has not read", "GET /metrics HTTP/1.1\r\nHost: probe\r\n\r\n", 0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _ := acceptSending(t, l, tt.give)
			onlyOpen(l, c)
			if tt.serverReads {
				awaitRestOfHeader(t, c)
			}
			l.mu.Lock()
			since := c.since
			l.mu.Unlock()
			if tt.grace == 0 {
				if v, _ := l.evictable(since.Add(time.Minute), true); v != nil {
					t.Fatal("evicted while pressed, although the server has the client's request to read")
				}
				return
			}
			at := since.Add(tt.pressed + time.Millisecond)
			if v, wait := l.evictable(at, false); v != nil || wait != tt.grace-tt.pressed-time.Millisecond {
				t.Errorf("not pressed, %v after it came: evicted %t, look again in %v; want none evicted, look again in %v",
					at.Sub(since), v != nil, wait, tt.grace-tt.pressed-time.Millisecond)
			}
			if v, _ := l.evictable(at, true); v != c {
				t.Errorf("pressed, %v after it came: evicted %p, want %p", at.Sub(since), v, c)
			}
			if v, wait := l.evictable(since.Add(tt.pressed-time.Millisecond), true); v != nil || wait != time.Millisecond {
				t.Errorf("pressed, within its grace: evicted %t, look again in %v; want none evicted, look again in 1ms", v != nil, wait)
			}
		})
	}
}

// acceptPending sees a connection in the accept queue, and no more once it
// is accepted.
func TestAcceptPending(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if _, known := acceptPending(ln); !known {
		t.Skip("this system does not let the listener look at its accept queue")
	}
	if pending, _ := acceptPending(ln); pending {
		t.Fatal("a connection pending before any client connected")
	}
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	testkit.Poll(t, 10*time.Second, "the connection to be pending", func() bool {
		pending, _ := acceptPending(ln)
		return pending
	})
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if pending, _ := acceptPending(ln); pending {
		t.Fatal("a connection still pending once accepted")
	}
}

// peekingListener returns a listener of 4 places on loopback, closed when
// the test ends, or skips the test where the listener cannot peek at a
// connection's unread bytes: what the eviction tests look at.
func peekingListener(t *testing.T) *Listener {
	t.Helper()
	if !peekKnown(t) {
		t.Skip("this system does not let the listener peek at a connection's unread bytes")
	}
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := New(inner, 4)
	t.Cleanup(func() { l.Close() })
	return l
}

// peekKnown reports whether peekSpoke can look at a loopback connection.
func peekKnown(t *testing.T) bool {
	_, known := peekSpoke(loopbackConn(t))
	return known
}

// loopbackConn returns the server's side of a loopback connection, closed
// when the test ends.
func loopbackConn(t *testing.T) net.Conn {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// acceptSending connects a client to l, lets it write what it sends, and
// accepts the server's side; both are closed when the test ends.
func acceptSending(t *testing.T, l *Listener, sends string) (server *conn, client net.Conn) {
	t.Helper()
	client, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	if sends != "" {
		if _, err := io.WriteString(client, sends); err != nil {
			t.Fatal(err)
		}
	}
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	server = c.(*conn)
	if sends != "" {
		testkit.Poll(t, 10*time.Second, "the client's bytes to reach the server's kernel", server.spoke)
	}
	return server, client
}

// awaitRestOfHeader has the server read what c's client sent, then wait
// in Read for more, as it does for a header that stopped coming; c is
// closed, and that Read ended, when the test ends.
func awaitRestOfHeader(t *testing.T, c *conn) {
	t.Helper()
	buf := make([]byte, 64)
	if _, err := c.Read(buf); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { // the server waits for the rest of the header
		defer close(done)
		c.Read(buf)
	}()
	t.Cleanup(func() { c.Close(); <-done })
	testkit.Poll(t, 10*time.Second, "the server to wait in Read", c.reading.Load)
}

// onlyOpen takes every connection of l but c out of evictable's sight;
// Close still gives their places back.
func onlyOpen(l *Listener, c *conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for o := range l.open {
		if o != c {
			delete(l.open, o)
		}
	}
}
