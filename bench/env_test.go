package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"

	"github.com/gcprobe/probe"
	otlpexporter "github.com/gcprobe/probe/exporters/otlp"
	"github.com/gcprobe/probe/memstats"
)

// The three ways the workload runs.
const (
	// modeRaw: no probe; finalizers and cleanups through the runtime.
	modeRaw = "raw"
	// modeDefault: probe.Start with its defaults (plus a fresh registry);
	// registrations through finalizerwatch's package-level functions.
	modeDefault = "default"
	// modeFull: every feature on: full stacks, ReadMemStats at its
	// minimum interval, the probe's own /metrics listener scraped over
	// HTTP, and OTLP traces to an in-process receiver.
	modeFull = "full"
)

var modes = []string{modeRaw, modeDefault, modeFull}

// scrapeInterval is how often every mode's metrics are scraped while the
// workload runs: Prometheus at an aggressive 1 s (15 s to 1 min is usual).
const scrapeInterval = time.Second

// leakReportInterval is the full mode's leak-report span interval, well
// below the default minute so that a run of 10 s pays for two reports.
const leakReportInterval = 5 * time.Second

// env is what surrounds the workload in one mode: the metrics registry
// and its scraper in every mode (an operator has both, probe or not), the
// probe in the probe modes, and the OTLP pipeline in the full mode.
type env struct {
	mode   string
	reg    *prometheus.Registry
	probe  *probe.Probe
	recv   *otlpReceiver
	tp     *otlpexporter.Provider
	client *http.Client
	url    string // the probe's /metrics, full mode

	stopScrape chan struct{}
	scrapeWG   sync.WaitGroup
	scrapes    atomic.Int64
	scrapeErr  atomic.Pointer[error]
}

// registrarFor returns how mode registers finalizers and cleanups.
func registrarFor(mode string) registrar {
	if mode == modeRaw {
		return rawRegistrar{}
	}
	return watchedRegistrar{}
}

// startEnv sets up mode's surroundings; with scrapeEvery > 0 it scrapes
// the metrics that often in the background until stop.
func startEnv(mode string, scrapeEvery time.Duration) (e *env, err error) {
	e = &env{mode: mode, reg: prometheus.NewRegistry(), stopScrape: make(chan struct{})}
	// What controller-runtime's metrics.Registry carries before any probe.
	e.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	defer func() {
		if err != nil {
			err = errors.Join(err, e.stop())
		}
	}()
	switch mode {
	case modeRaw:
	case modeDefault:
		if e.probe, err = probe.Start(probe.WithRegisterer(e.reg)); err != nil {
			return e, err
		}
	case modeFull:
		if e.recv, err = startOTLPReceiver(); err != nil {
			return e, err
		}
		// The provider gcprobe builds from the OTEL_* environment, told
		// where the receiver is (options win over the environment).
		e.tp, err = otlpexporter.NewTracerProvider(context.Background(),
			otlpexporter.WithProtocol(otlpexporter.ProtocolGRPC),
			otlpexporter.WithGRPCOptions(otlptracegrpc.WithEndpoint(e.recv.Addr()), otlptracegrpc.WithInsecure()))
		if err != nil {
			return e, err
		}
		e.probe, err = probe.Start(
			probe.WithRegisterer(e.reg),
			probe.WithFullStacks(true),
			probe.WithReadMemStats(true),
			probe.WithSamplerOptions(memstats.WithReadMemStatsInterval(memstats.MinReadMemStatsInterval)),
			probe.WithListenAddr("127.0.0.1:0"),
			probe.WithTracerProvider(e.tp),
			probe.WithLeakReportInterval(leakReportInterval),
		)
		if err != nil {
			return e, err
		}
		e.client = &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}
		e.url = "http://" + e.probe.Addr().String() + probe.MetricsPath
	default:
		return e, fmt.Errorf("unknown mode %q", mode)
	}
	if scrapeEvery > 0 {
		e.scrapeWG.Go(func() { e.scrapeLoop(scrapeEvery) })
	}
	return e, nil
}

func (e *env) scrapeLoop(every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-e.stopScrape:
			return
		case <-t.C:
			if err := e.scrape(); err != nil {
				e.scrapeErr.CompareAndSwap(nil, &err)
			}
		}
	}
}

// scrape gathers the metrics once as Prometheus would: over HTTP from the
// probe's listener in the full mode, from the registry otherwise.
func (e *env) scrape() error {
	defer e.scrapes.Add(1)
	if e.url == "" {
		_, err := e.reg.Gather()
		return err
	}
	resp, err := e.client.Get(e.url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", e.url, resp.Status)
	}
	return nil
}

// scrapeBody returns the exposition the full mode's listener serves.
func (e *env) scrapeBody() (string, error) {
	if e.url == "" {
		return "", errors.New("no listener in mode " + e.mode)
	}
	resp, err := e.client.Get(e.url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// err returns the first scrape error, if any.
func (e *env) err() error {
	if p := e.scrapeErr.Load(); p != nil {
		return *p
	}
	return nil
}

// stop stops everything startEnv started, in reverse order, and waits for
// it.
func (e *env) stop() error {
	close(e.stopScrape)
	e.scrapeWG.Wait()
	var errs []error
	if e.probe != nil {
		errs = append(errs, e.probe.Stop())
	}
	if e.tp != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		errs = append(errs, e.tp.Shutdown(ctx))
		cancel()
	}
	if e.recv != nil {
		e.recv.Stop()
	}
	if e.client != nil {
		e.client.CloseIdleConnections()
	}
	return errors.Join(errs...)
}

// flushSpans exports every span ended so far and returns how many the
// receiver has got.
func (e *env) flushSpans() (int64, error) {
	if e.tp == nil {
		return 0, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := e.tp.ForceFlush(ctx)
	return e.recv.spans.Load(), err
}
