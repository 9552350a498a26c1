package probe

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	pprofexporter "github.com/gcprobe/probe/exporters/pprof"
)

// The probe's own listener is for programs without a metrics server. It is
// unauthenticated, so it serves as little as it can: a few paths, GET and
// HEAD, with timeouts on every phase of a request, a cap on open
// connections and on concurrent scrapes (the profile handler caps its own
// builds).
const (
	// MetricsPath and ProfilePath are what WithListenAddr serves, besides
	// the live page (PagePath).
	MetricsPath = "/metrics"
	ProfilePath = pprofexporter.FinalizersPath

	// MaxListenerConns is the most connections the listener of
	// WithListenAddr keeps open at once. When all are open, a new
	// connection takes the place of the one that has waited longest
	// without a request in progress (one that has sent nothing, is
	// idle between requests or is slow to send its header); if every
	// place serves a request, the new ones wait in the kernel's accept
	// queue, costing the program nothing (a scrape waits rather than
	// fails). Only a connection whose server waits for its client is
	// evicted, never one whose request the program was slow to read.
	// A connection has a grace in its state before it may go (a second
	// for a header begun, 250 ms otherwise), which shrinks to 20 ms for
	// a header begun and 50 ms otherwise while a new connection waits
	// to be accepted: during a flood of clients that trickle their
	// headers or send part of one, a scrape (whose header comes in one
	// packet) waits behind them for a fraction of a second, and a
	// client that has not sent its whole header that soon after it was
	// accepted loses its place. A request that carries a body is
	// refused (413) and its connection closed without reading the
	// body: no path of the listener takes one. A
	// connection a client opened and left unused is silent: net/http's
	// Transport may keep one it dialled for a request that another
	// connection served, and a request it later sends on it after an
	// eviction fails without a retry. Once more than half of them are
	// open, each response closes its connection instead of keeping it
	// alive, so that busy clients take turns rather than hold every
	// place. For many concurrent clients, mount Handler in a server of
	// your own.
	MaxListenerConns = 32
	// ListenerIdleTimeout is how long the listener of WithListenAddr keeps
	// an idle keep-alive connection open.
	ListenerIdleTimeout = 5 * time.Second
	// ListenerReadHeaderTimeout is how long the listener of WithListenAddr
	// waits for a request's header, from the connection's start (or, kept
	// alive, from the request's first byte), before closing the
	// connection. A scraper sends its header in one packet; a client that
	// connects and sends nothing, or part of a header, holds a place this
	// long at most, less when the listener is full (a new connection
	// evicts it: see MaxListenerConns).
	ListenerReadHeaderTimeout = 2 * time.Second

	readTimeout     = 10 * time.Second
	writeTimeout    = 30 * time.Second
	shutdownTimeout = 5 * time.Second
	maxScrapes      = 8
	queueWait       = 10 * time.Second
)

func (p *Probe) listen() error {
	inner, err := net.Listen("tcp", p.cfg.listenAddr)
	if err != nil {
		return fmt.Errorf("probe: WithListenAddr: %w", err)
	}
	if err := p.checkBound(inner.Addr()); err != nil {
		inner.Close()
		return err
	}
	ln := newLimitListener(inner, MaxListenerConns)
	if deferAcceptOn {
		ln.deferred = deferAccept(inner)
	}
	h := p.Handler()
	p.mu.Lock()
	p.addr = ln.Addr()
	p.listener = ln
	p.mu.Unlock()
	p.server = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if c, ok := r.Context().Value(connKey{}).(*limitConn); ok {
				ln.serving(c)
			}
			if ln.openConns() > MaxListenerConns/2 {
				// Busy: let the next client have this place.
				w.Header().Set("Connection", "close")
			}
			if r.ContentLength != 0 {
				refuseBody(w)
				return
			}
			h.ServeHTTP(w, r)
		}),
		ConnState: ln.connState,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, c)
		},
		ReadHeaderTimeout: ListenerReadHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       ListenerIdleTimeout,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          nil,
	}
	srv := p.server
	p.goSafe("listener", func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			p.cfg.logger.Error("gcprobe: listener stopped", "addr", ln.Addr().String(), "err", err)
		}
	})
	return nil
}

// refuseBody answers a request that carries a body (a declared length,
// or chunks) with 413 and closes its connection without reading the body:
// none of the listener's paths takes one. Left alone, net/http reads up to
// 256 KiB of an unread body before it writes the answer's header, and
// again after the handler returns, so as to keep the connection alive: a
// client that sent a GET with "Content-Length: 200000" and then a byte a
// second held its place, in a state never evicted, and one of the 8 scrape
// slots, for the whole read timeout (10 s); 64 of them made scrapes wait
// 17 s. "Connection: close" skips the first read; a read deadline already
// past ends the second at once. Refused rather than served, such a request
// costs no scrape: clients that send one and reconnect when answered do
// not flood the scrapes.
func refuseBody(w http.ResponseWriter) {
	w.Header().Set("Connection", "close")
	// w is net/http's own, which sets deadlines: no error to expect.
	_ = http.NewResponseController(w).SetReadDeadline(time.Now())
	http.Error(w, "gcprobe: the listener takes no request body", http.StatusRequestEntityTooLarge)
}

// checkBound checks the address the listener is bound to: loopback, unless
// WithUnauthenticatedListenAddr asked for more, in which case it warns
// (through the WithLogger logger, else slog.Default(): a warning about
// exposure must not go to the default discarding logger).
func (p *Probe) checkBound(a net.Addr) error {
	ta, ok := a.(*net.TCPAddr)
	if !ok || ta.IP.IsLoopback() {
		return nil
	}
	if !p.cfg.listenWide {
		return fmt.Errorf("probe: WithListenAddr: %q is bound to %s, not loopback, and the listener is unauthenticated; use WithUnauthenticatedListenAddr to expose it on purpose", p.cfg.listenAddr, ta)
	}
	p.eventLogger().Warn("gcprobe: the listener serves metrics and profiles unauthenticated beyond loopback (WithUnauthenticatedListenAddr): anyone who reaches this address can read them",
		"addr", ta.String())
	return nil
}

// Handler returns what WithListenAddr serves: /metrics,
// /debug/pprof/finalizers and the live page at /debug/gcprobe/ (PageHandler;
// /debug/gcprobe redirects to it), GET and HEAD only (405 otherwise), 404 for any
// other path. At most 8 scrapes and 4 profile builds run at once; the
// others wait up to 10 s for their turn, then get 503. A delta profile
// (?seconds=N, N below the listener's 30 s write timeout: see
// pprofexporter.Handler) waits its N seconds outside that queue, at most
// pprofexporter.MaxConcurrentDeltas of them per profile (429 beyond). The listener of
// WithListenAddr holds at most MaxListenerConns connections open (a new
// one takes the place of one without a request in progress), closes those
// idle for ListenerIdleTimeout and those that send no request header
// within ListenerReadHeaderTimeout, and refuses a request with a body
// (413); the handler itself ignores a body. Mount the handler yourself to
// serve both behind your own authentication (those connection limits are
// then your server's to set). /metrics shows the whole registry of the
// probe's registerer if it is also a prometheus.Gatherer (the default,
// prometheus.DefaultRegisterer, is: the program's own metrics appear there
// too), else, or with WithOwnMetrics, the probe's collector alone. Like ProfileHandler it serves before Start and while the
// probe runs; Stop waits for the requests in progress and answers 503 to
// those still waiting for their turn, and to every request after it. The
// handler of a nil or zero-value Probe answers 500 with an error naming
// the problem.
func (p *Probe) Handler() http.Handler {
	if err := p.made("Handler"); err != nil {
		return unmadeHandler(err)
	}
	g, ok := p.cfg.registerer.(prometheus.Gatherer)
	if !ok || p.cfg.ownMetrics {
		reg := prometheus.NewRegistry()
		reg.MustRegister(p.collector)
		g = reg
	}
	done := p.life.Done()
	metrics := queue(maxScrapes, done, promhttp.HandlerFor(g, promhttp.HandlerOpts{
		ErrorHandling: promhttp.ContinueOnError,
		Timeout:       writeTimeout / 2,
	}))
	profile := p.profileRoute(p.profile)
	allocs := p.profileRoute(pprofexporter.AllocsProfilerHandler(p.heap))
	page := p.pageHandler()
	return p.guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var h http.Handler
		switch r.URL.Path {
		case MetricsPath:
			h = metrics
		case ProfilePath:
			h = profile
		case AllocsProfilePath:
			h = allocs
		case PagePath, PagePath + PageDataPath, PagePath + "page.js", PagePath + "page.css":
			h = page
		case strings.TrimSuffix(PagePath, "/"):
			h = http.RedirectHandler(PagePath, http.StatusMovedPermanently)
		default:
			http.NotFound(w, r)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h.ServeHTTP(w, r)
	}))
}

// queue lets at most n requests into h at once; the others wait for a
// place, up to queueWait, and then get 503 with Retry-After. A scrape that
// waits a little is better than one refused at once: Prometheus would
// record the target as down. Once stop is closed, waiting requests give up
// at once (503): Stop must not wait for them.
func queue(n int, stop <-chan struct{}, h http.Handler) http.Handler {
	slots := make(chan struct{}, n)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t := time.NewTimer(queueWait)
		defer t.Stop()
		select {
		case slots <- struct{}{}:
		case <-t.C:
			w.Header().Set("Retry-After", "1")
			http.Error(w, "too many concurrent requests", http.StatusServiceUnavailable)
			return
		case <-stop:
			http.Error(w, "gcprobe: the probe is stopping", http.StatusServiceUnavailable)
			return
		case <-r.Context().Done():
			return
		}
		defer func() { <-slots }()
		h.ServeHTTP(w, r)
	})
}

// profileRoute serves a profile handler h: a delta (?seconds=N) through
// untilStop, the others through queue. A delta waits its N seconds
// outside queue's places, which are for builds: four scrapers' deltas
// would otherwise hold every place for N seconds, and the cumulative
// profile would wait behind them. h bounds the deltas waiting at once
// itself (pprofexporter.MaxConcurrentDeltas) and their builds with the
// others (pprofexporter.MaxConcurrentBuilds).
func (p *Probe) profileRoute(h http.Handler) http.Handler {
	queued := queue(pprofexporter.MaxConcurrentBuilds, p.life.Done(), h)
	direct := p.untilStop(h)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isDelta(r) {
			direct.ServeHTTP(w, r)
			return
		}
		queued.ServeHTTP(w, r)
	})
}

// isDelta reports whether r asks for a delta profile (?seconds).
func isDelta(r *http.Request) bool {
	return r.URL.RawQuery != "" && r.URL.Query().Has(pprofexporter.DeltaParam)
}

// errStopping is the cause of a delta request's cancellation by Stop.
var errStopping = errors.New("gcprobe: the probe is stopping")

// untilStop serves h with a delta request's context cancelled, with
// errStopping, when the probe stops: Stop waits for the requests in
// progress, and must not wait for a delta's N seconds. Other requests
// pass straight through.
func (p *Probe) untilStop(h http.Handler) http.Handler {
	done := p.life.Done()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !isDelta(r) {
			h.ServeHTTP(w, r)
			return
		}
		ctx, cancel := context.WithCancelCause(r.Context())
		defer cancel(nil)
		// Ends when the request does (cancel above) or the probe stops.
		go func() {
			select {
			case <-done:
				cancel(errStopping)
			case <-ctx.Done():
			}
		}()
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

// deferAcceptOn is whether listen asks the kernel to defer accepting silent
// connections (deferAccept); tests turn it off to see the eviction alone,
// as on a system without TCP_DEFER_ACCEPT.
var deferAcceptOn = true

// limitListener keeps at most n connections open at once. When all n
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
type limitListener struct {
	net.Listener
	slots     chan struct{} // one token per open connection, and Accept's
	conns     atomic.Int64  // connections accepted and not yet closed
	closed    chan struct{}
	closeOnce sync.Once
	wake      chan struct{} // a connection may have become evictable
	// deferred is how long the kernel held back a connection whose
	// client sent nothing (deferAccept), 0 if it does not: such a
	// connection has been silent that long already when accepted.
	deferred time.Duration

	mu   sync.Mutex
	open map[*limitConn]struct{} // guarded by mu, as each conn's state
}

// A connection is evicted only once it has been this long in its state:
// evictGrace for one that has sent nothing or is idle between requests,
// headerGrace for one whose request's header is still coming in; but
// pressGrace and pressHeaderGrace while a new connection waits in the
// accept queue. The places turn over no faster than MaxListenerConns per
// grace, and a scrape in the accept queue waits for every connection
// ahead of it: with the header grace, behind 200 clients trickling their
// headers it waited 5 s, behind 300 that sent "G" and nothing more (which
// gets past TCP_DEFER_ACCEPT) 6 s. The pressed graces are what a client
// has, during such a flood, to send its header once connected: a scraper
// sends it at once, in one packet, and from then on (its bytes waiting in
// the kernel, or its header being read) its server does not wait for it.
// A header begun and not finished, the server waiting, gets the shorter.
const (
	evictGrace       = 250 * time.Millisecond
	headerGrace      = time.Second
	pressGrace       = 50 * time.Millisecond
	pressHeaderGrace = 20 * time.Millisecond
)

func newLimitListener(l net.Listener, n int) *limitListener {
	return &limitListener{
		Listener: l,
		slots:    make(chan struct{}, n),
		closed:   make(chan struct{}),
		wake:     make(chan struct{}, 1),
		open:     make(map[*limitConn]struct{}),
	}
}

// Accept waits for a free place, evicting a connection that holds one
// without a request in progress, then accepts a connection.
func (l *limitListener) Accept() (net.Conn, error) {
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
		pending, known := acceptPending(l.Listener)
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
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	lc := &limitConn{Conn: c, l: l, state: http.StateNew, since: time.Now()}
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

// evictable returns the connection without a request in progress to give
// its place to a new one, or, if none may yet, how long until Accept
// should look again (0: none may until a request ends, which wakes it).
//
// Only a connection whose server waits for its client may go: one the
// server's goroutine is reading from (or has not begun to read, in a
// connection whose client has sent nothing) while the kernel holds nothing
// from the client for it. A place is never taken from a client because the
// program was slow: under a CPU-bound load the connection's goroutine may
// wait a second or more to be scheduled, and a scrape whose request
// already waits in the kernel, or whose header the server is parsing, was
// evicted after headerGrace and failed with EOF (issue 26, item 14).
//
// A connection idle between requests goes first, after evictGrace: an HTTP
// client retries a request on a kept-alive connection that the server
// closed. Then one whose client has sent nothing, after evictGrace; then
// one whose request's header is still coming in, after headerGrace. When
// pressed (a connection waits to be accepted), they go after pressGrace,
// pressGrace and pressHeaderGrace instead. Among equals, the one furthest
// past its grace goes: the oldest, when pressed.
func (l *limitListener) evictable(now time.Time, pressed bool) (*limitConn, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var wait time.Duration
	later := func(d time.Duration) {
		if wait == 0 || d < wait {
			wait = d
		}
	}
	// The connections past their grace, best first: the lowest rank,
	// then the furthest past its grace. Only then is each asked, in
	// turn, whether its server waits for its client, which asks the
	// kernel: under a flood every place is past its grace, and a
	// system call or two for each of them, at each new connection,
	// slowed the listener's turnover.
	var buf [MaxListenerConns]candidate
	cands := buf[:0]
	for c := range l.open {
		if c.serving || c.state == http.StateActive {
			continue
		}
		rank, grace := 0, evictGrace
		if pressed {
			grace = pressGrace
		}
		if c.state != http.StateIdle {
			rank = 1
			if c.consumed.Load() > 0 {
				rank, grace = 2, headerGrace
				if pressed {
					grace = pressHeaderGrace
				}
			}
		}
		d := now.Sub(c.since.Add(grace))
		if d < 0 {
			later(-d)
			continue
		}
		cands = append(cands, candidate{c, rank, d})
	}
	slices.SortFunc(cands, func(a, b candidate) int {
		if a.rank != b.rank {
			return cmp.Compare(a.rank, b.rank)
		}
		return cmp.Compare(b.overdue, a.overdue)
	})
	for _, k := range cands {
		if k.c.waitsForClient() {
			return k.c, 0
		}
		// The server is behind, not the client; it will read, parse
		// and serve, or soon wait (its Read wakes Accept): look again
		// then.
		later(recheckEvery)
	}
	return nil, wait
}

// candidate is a connection past its grace, for evictable to rank.
type candidate struct {
	c       *limitConn
	rank    int
	overdue time.Duration // how far past its grace
}

// recheckEvery is how often a full Accept looks again for a connection
// that may be evicted while some are past their grace but their server
// has not caught up with what the client sent.
const recheckEvery = 50 * time.Millisecond

// connState is the server's ConnState hook: it follows each connection
// from new (nothing read) to active (a request is coming in) to idle
// (kept alive between requests).
func (l *limitListener) connState(c net.Conn, s http.ConnState) {
	lc, ok := c.(*limitConn)
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
func (l *limitListener) serving(c *limitConn) {
	l.mu.Lock()
	c.serving = true
	l.mu.Unlock()
}

// signal wakes an Accept waiting for an evictable connection.
func (l *limitListener) signal() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// Close closes the listener and wakes an Accept waiting for a place.
func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

// openConns returns how many connections are open.
func (l *limitListener) openConns() int { return int(l.conns.Load()) }

// limitConn gives its place back when it is closed, once. state, since and
// serving are guarded by the listener's mu.
type limitConn struct {
	net.Conn
	l       *limitListener
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
func (c *limitConn) Read(b []byte) (int, error) {
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
func (c *limitConn) spoke() bool {
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
func (c *limitConn) waitsForClient() bool {
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

func (c *limitConn) Close() error {
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

// connKey is the request context key of the listener's connection.
type connKey struct{}
