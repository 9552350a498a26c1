package listener

import (
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Listener keeps at most n connections open at once. When all n
// are open, a new connection takes the place of the one that has waited
// longest without a request in progress: a connection that has sent
// nothing yet, one kept alive between requests, or one still sending its
// request's header (a slow or silent client). Without that, clients that
// connect and send nothing held every place for the read-header timeout,
// and a scrape waited behind them in the kernel's accept queue for tens of
// seconds (issue 26). A connection is not evicted in its first moments in
// a state (evictGrace, headerGrace; shorter graces while another waits to
// be accepted): a client that just connected has time to send its request.
// If every place holds a request being served, Accept waits for one to
// end: the cap holds.
//
// The listener sees a connection's states only through its server's hooks:
// serve it with ConnState, ConnContext and Handler set as the package
// comment shows.
type Listener struct {
	inner     net.Listener
	slots     chan struct{} // one token per open connection, and Accept's
	conns     atomic.Int64  // connections accepted and not yet closed
	closed    chan struct{}
	closeOnce sync.Once
	wake      chan struct{} // a connection may have become evictable
	// deferred is how long the kernel held back a connection whose
	// client sent nothing (deferAccept), 0 if it does not: such a
	// connection has been silent that long already when accepted.
	deferred time.Duration

	mu    sync.Mutex
	open  map[*conn]struct{} // guarded by mu, as each conn's state
	cands []candidate        // evictable's, guarded by mu: room for n
}

// New returns a listener that accepts from l and keeps at most n of its
// connections open. Closing it closes l.
func New(l net.Listener, n int) *Listener {
	return &Listener{
		inner:  l,
		slots:  make(chan struct{}, n),
		closed: make(chan struct{}),
		wake:   make(chan struct{}, 1),
		open:   make(map[*conn]struct{}),
		cands:  make([]candidate, 0, n),
	}
}

// DeferAccept asks the kernel, where it can, to hand the listener a
// connection only once its client has sent data (deferAccept:
// TCP_DEFER_ACCEPT, Linux only). A connection that reaches the listener
// silent all the same has been silent that long already: Accept dates it
// back by as much, so that it gives its place to the next connection at
// once. Best effort, and nothing elsewhere: eviction alone then bounds
// what silent clients hold. Call it before the first Accept, which reads
// what it sets without a lock.
func (l *Listener) DeferAccept() {
	l.deferred = deferAccept(l.inner)
}

// Accept waits for a free place, evicting a connection that holds one
// without a request in progress, then accepts a connection.
func (l *Listener) Accept() (net.Conn, error) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for taken := false; !taken; {
		select {
		case l.slots <- struct{}{}:
			taken = true
			continue
		case <-l.closed:
			return nil, net.ErrClosed
		default:
		}
		// Full. Evict one (its Close gives its place back at once), or
		// wait until one may be evicted or closes. A connection waiting
		// to be accepted, which may be a scrape, shortens the graces;
		// where the system cannot tell, a full listener is taken for
		// one with a connection waiting: at worst a slow client makes
		// way for nobody, and one place stays free until the next.
		pending, known := acceptPending(l.inner)
		pressed := pending || !known
		victim, wait := l.evictable(time.Now(), pressed)
		if victim != nil {
			victim.Close()
			continue
		}
		if known && !pressed && wait > recheckEvery {
			// Look at the accept queue again soon: a connection that
			// comes meanwhile must not wait out a whole grace.
			wait = recheckEvery
		}
		var tick <-chan time.Time
		if wait > 0 {
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			tick = timer.C
		}
		select {
		case l.slots <- struct{}{}:
			taken = true
		case <-l.closed:
			return nil, net.ErrClosed
		case <-l.wake:
		case <-tick:
		}
	}
	c, err := l.inner.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	lc := &conn{Conn: c, l: l, state: http.StateNew, since: time.Now()}
	if l.deferred > 0 && !lc.spoke() {
		// The kernel held it back that long for want of a request:
		// count that time, so that it gives its place to the next
		// connection at once.
		lc.since = lc.since.Add(-l.deferred)
	}
	l.mu.Lock()
	l.open[lc] = struct{}{}
	l.mu.Unlock()
	l.conns.Add(1)
	return lc, nil
}

// ConnState is the server's ConnState hook: it follows each connection
// from new (nothing read) to active (a request is coming in) to idle
// (kept alive between requests).
func (l *Listener) ConnState(c net.Conn, s http.ConnState) {
	lc, ok := c.(*conn)
	if !ok {
		return
	}
	l.mu.Lock()
	if s != lc.state { // StateNew was set, and dated, by Accept
		lc.state, lc.since = s, time.Now()
	}
	if s != http.StateActive {
		lc.serving = false
	}
	l.mu.Unlock()
	if s == http.StateIdle {
		l.signal()
	}
}

// serving marks c as serving a request, from the handler's start until the
// connection is idle again or closed (the response is written in between):
// it is not evicted meanwhile.
func (l *Listener) serving(c *conn) {
	l.mu.Lock()
	c.serving = true
	l.mu.Unlock()
}

// signal wakes an Accept waiting for an evictable connection.
func (l *Listener) signal() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// Close closes the listener and wakes an Accept waiting for a place.
func (l *Listener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return l.inner.Close()
}

// Addr returns the address of the listener it accepts from.
func (l *Listener) Addr() net.Addr { return l.inner.Addr() }

// OpenConns returns how many connections are open.
func (l *Listener) OpenConns() int { return int(l.conns.Load()) }
