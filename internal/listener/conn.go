package listener

import (
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// conn gives its place back when it is closed, once. state, since and
// serving are guarded by the listener's mu.
type conn struct {
	net.Conn
	l       *Listener
	once    sync.Once
	state   http.ConnState
	since   time.Time // when it entered state
	serving bool      // a handler has begun on its current request
	// reading is set while the server is in Read on the connection
	// (waiting for bytes, or taking them); consumed counts the bytes its
	// Reads returned, noted after reading is cleared.
	reading  atomic.Bool
	consumed atomic.Uint64
}

// Read reads from the connection, noting that the server waits in it and
// what it took.
func (c *conn) Read(b []byte) (int, error) {
	c.reading.Store(true)
	// A full Accept may wait for this server to catch up with its
	// client: in Read, having taken all the client sent, it may be
	// evicted. Without this wake-up Accept looked again only every
	// recheckEvery, and under a CPU-bound flood, whose fresh
	// connections' goroutines wait to be scheduled, it often waited so.
	c.l.signal()
	n, err := c.Conn.Read(b)
	c.reading.Store(false)
	if n > 0 {
		c.consumed.Add(uint64(n))
	}
	return n, err
}

// spoke reports whether the client has sent anything on c: read by the
// server, or waiting in the kernel to be read.
func (c *conn) spoke() bool {
	if c.consumed.Load() > 0 {
		return true
	}
	spoke, _ := peekSpoke(c.Conn)
	return spoke
}

// waitsForClient reports whether the server waits for c's client: it is
// in Read on c (or has read nothing from it yet), and has taken and noted
// every byte the client sent. The kernel's count of received bytes
// (bytesReceived) decides where the system gives it: a goroutine preempted
// between taking a request's bytes and noting them still shows as in Read,
// with nothing left in the kernel, but its count lags the kernel's. Where
// the kernel does not count, nothing waiting in the kernel (peekSpoke) and
// being in Read decide: a server goroutine woken by the client's bytes is
// in Read until it is scheduled, with the bytes still in the kernel.
func (c *conn) waitsForClient() bool {
	reading := c.reading.Load()
	consumed := c.consumed.Load()
	if !reading && consumed > 0 {
		return false // parsing a header, or about to read again
	}
	if received, known := bytesReceived(c.Conn); known {
		// Bytes waiting in the kernel, or taken and not yet noted.
		return received == consumed
	}
	pending, known := peekSpoke(c.Conn)
	return !(known && pending)
}

// Close closes the connection and gives its place back, once.
func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.open, c)
		c.l.mu.Unlock()
		c.l.conns.Add(-1)
		<-c.l.slots
	})
	return err
}
