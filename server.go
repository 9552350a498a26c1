package probe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	pprofexporter "github.com/gcprobe/probe/exporters/pprof"
	"github.com/gcprobe/probe/internal/listener"
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

// listen binds WithListenAddr's address and serves Handler on it through
// the bounded listener (internal/listener), with the timeouts above.
func (p *Probe) listen() error {
	inner, err := net.Listen("tcp", p.cfg.listenAddr)
	if err != nil {
		return fmt.Errorf("probe: WithListenAddr: %w", err)
	}
	if err := p.checkBound(inner.Addr()); err != nil {
		inner.Close()
		return err
	}
	ln := listener.New(inner, MaxListenerConns)
	if deferAcceptOn {
		ln.DeferAccept()
	}
	h := p.Handler()
	p.mu.Lock()
	p.addr = ln.Addr()
	p.listener = ln
	p.mu.Unlock()
	p.server = &http.Server{
		Handler:           ln.Handler(h),
		ConnState:         ln.ConnState,
		ConnContext:       ln.ConnContext,
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
// connections (listener.Listener.DeferAccept); tests turn it off to see the eviction alone,
// as on a system without TCP_DEFER_ACCEPT.
var deferAcceptOn = true
