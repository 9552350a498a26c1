package probe

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	pprofexporter "github.com/gcprobe/probe/exporters/pprof"
)

// The probe's own listener is for programs without a metrics server. It is
// unauthenticated, so it serves as little as it can: two paths, GET and
// HEAD, with timeouts on every phase of a request, a cap on open
// connections and on concurrent scrapes (the profile handler caps its own
// builds).
const (
	// MetricsPath and ProfilePath are what WithListenAddr serves.
	MetricsPath = "/metrics"
	ProfilePath = "/debug/pprof/finalizers"

	// MaxListenerConns is the most connections the listener of
	// WithListenAddr keeps open at once. It accepts no more until one
	// closes: the connections beyond wait in the kernel's accept queue,
	// costing the program nothing (a scrape waits rather than fails).
	// Once more than half of them are open, each response closes its
	// connection instead of keeping it alive, so that busy clients take
	// turns rather than hold every place.
	MaxListenerConns = 32
	// ListenerIdleTimeout is how long the listener of WithListenAddr keeps
	// an idle keep-alive connection open.
	ListenerIdleTimeout = 5 * time.Second

	readHeaderTimeout = 5 * time.Second
	readTimeout       = 10 * time.Second
	writeTimeout      = 30 * time.Second
	shutdownTimeout   = 5 * time.Second
	maxScrapes        = 8
	queueWait         = 10 * time.Second
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
	h := p.Handler()
	p.mu.Lock()
	p.addr = ln.Addr()
	p.listener = ln
	p.mu.Unlock()
	p.server = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if ln.open() > MaxListenerConns/2 {
				// Busy: let the next client have this place.
				w.Header().Set("Connection", "close")
			}
			h.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: readHeaderTimeout,
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

// Handler returns what WithListenAddr serves: /metrics and
// /debug/pprof/finalizers, GET and HEAD only (405 otherwise), 404 for any
// other path. At most 8 scrapes and 4 profile builds run at once; the
// others wait up to 10 s for their turn, then get 503. The listener of
// WithListenAddr holds at most MaxListenerConns connections open and
// closes those idle for ListenerIdleTimeout. Mount the handler yourself to
// serve both behind your own authentication (those connection limits are
// then your server's to set). /metrics shows the probe's registerer if it
// is also a prometheus.Gatherer (prometheus.DefaultRegisterer is), else the
// probe's collector alone. Like ProfileHandler it serves before Start and while the
// probe runs; Stop waits for the requests in progress and answers 503 to
// those still waiting for their turn, and to every request after it. The
// handler of a nil or zero-value Probe answers 500 with an error naming
// the problem.
func (p *Probe) Handler() http.Handler {
	if err := p.made("Handler"); err != nil {
		return unmadeHandler(err)
	}
	g, ok := p.cfg.registerer.(prometheus.Gatherer)
	if !ok {
		reg := prometheus.NewRegistry()
		reg.MustRegister(p.collector)
		g = reg
	}
	done := p.life.Done()
	metrics := queue(maxScrapes, done, promhttp.HandlerFor(g, promhttp.HandlerOpts{
		ErrorHandling: promhttp.ContinueOnError,
		Timeout:       writeTimeout / 2,
	}))
	profile := queue(pprofexporter.MaxConcurrentBuilds, done, p.profile)
	return p.guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var h http.Handler
		switch r.URL.Path {
		case MetricsPath:
			h = metrics
		case ProfilePath:
			h = profile
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

// limitListener accepts at most n connections open at once; Accept waits
// for one to close (or for the listener to close) before taking the next
// from the kernel's queue. Unlike a server-side cap on requests, this
// bounds the goroutines and buffers that idle connections hold.
type limitListener struct {
	net.Listener
	slots     chan struct{} // one token per open connection, and Accept's
	conns     atomic.Int64  // connections accepted and not yet closed
	closed    chan struct{}
	closeOnce sync.Once
}

func newLimitListener(l net.Listener, n int) *limitListener {
	return &limitListener{Listener: l, slots: make(chan struct{}, n), closed: make(chan struct{})}
}

// Accept waits for a free place, then accepts a connection.
func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.closed:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	l.conns.Add(1)
	return &limitConn{Conn: c, release: func() {
		l.conns.Add(-1)
		<-l.slots
	}}, nil
}

// Close closes the listener and wakes an Accept waiting for a place.
func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

// open returns how many connections are open.
func (l *limitListener) open() int { return int(l.conns.Load()) }

// limitConn gives its place back when it is closed, once.
type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
