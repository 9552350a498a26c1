package probe

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	pprofexporter "github.com/gcprobe/probe/exporters/pprof"
)

// The probe's own listener is for programs without a metrics server. It is
// unauthenticated, so it serves as little as it can: two paths, GET and
// HEAD, with timeouts on every phase of a request and a cap on concurrent
// scrapes (the profile handler caps its own builds).
const (
	// MetricsPath and ProfilePath are what WithListenAddr serves.
	MetricsPath = "/metrics"
	ProfilePath = "/debug/pprof/finalizers"

	readHeaderTimeout = 5 * time.Second
	readTimeout       = 10 * time.Second
	writeTimeout      = 30 * time.Second
	idleTimeout       = 60 * time.Second
	shutdownTimeout   = 5 * time.Second
	maxScrapes        = 8
	queueWait         = 10 * time.Second
)

func (p *Probe) listen() error {
	ln, err := net.Listen("tcp", p.cfg.listenAddr)
	if err != nil {
		return fmt.Errorf("probe: WithListenAddr: %w", err)
	}
	p.mu.Lock()
	p.addr = ln.Addr()
	p.mu.Unlock()
	p.server = &http.Server{
		Handler:           p.Handler(),
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
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

// Handler returns what WithListenAddr serves: /metrics and
// /debug/pprof/finalizers, GET and HEAD only (405 otherwise), 404 for any
// other path. At most 8 scrapes and 4 profile builds run at once; the
// others wait up to 10 s for their turn, then get 503. Mount it yourself to
// serve both behind your own authentication. /metrics shows the probe's
// registerer if it is also a prometheus.Gatherer
// (prometheus.DefaultRegisterer is), else the probe's collector alone. Like ProfileHandler it serves before Start and while the
// probe runs; Stop waits for the requests in progress and answers 503 to
// those still waiting for their turn, and to every request after it.
func (p *Probe) Handler() http.Handler {
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
