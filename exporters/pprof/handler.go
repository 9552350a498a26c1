package pprofexporter

import (
	"bytes"
	"io"
	"net/http"
	"strconv"

	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/google/pprof/profile"
)

// MaxConcurrentBuilds is how many profiles a Handler builds at once; a
// request beyond that gets 503 Service Unavailable with a Retry-After
// header rather than queueing. A build reads the whole ledger and holds
// the encoded profile in memory, so an unbounded number of concurrent
// scrapes would cost unbounded CPU and memory.
const MaxConcurrentBuilds = 4

// RetryAfterSeconds is the Retry-After a Handler sends with a 503.
const RetryAfterSeconds = 1

// Handler returns an http.Handler that serves the profile of ledger (see
// Profile) as a download named finalizers.pb.gz, for go tool pprof:
// mount it at /debug/pprof/finalizers. With the query ?sampled=1 it serves
// SampledProfile instead, the sampled registration stacks. With ?debug=1
// (any non-zero number, as net/http/pprof reads it) it serves the same
// profile as plain text for a person instead (WriteText). It answers GET
// and HEAD (HEAD
// builds nothing), 405 Method Not Allowed to anything else, and 503 when
// MaxConcurrentBuilds profiles are being built already. A nil ledger means
// finalizerwatch.Default. The handler is safe for concurrent use.
//
// With ?seconds=N (DeltaParam) it serves a delta profile, as continuous
// profilers (Grafana Alloy's pyroscope.scrape, Parca) ask for a custom
// path with delta on: it takes the profile, waits N seconds, takes it
// again, and answers the later one with each counter (registered,
// executed, dropped: counts since the start) less its earlier value at
// the same stack and labels, and each gauge (outstanding, suspect,
// growth, leaked: states) as it is at the end; samples whose values are
// all zero are left out. TimeNanos is the request's start, DurationNanos
// N seconds. It combines with ?sampled=1 and with ?debug=1. N must be an
// integer from 1 to MaxDeltaSeconds, and below the WriteTimeout of the
// http.Server that serves the request if it has one: else 400, naming
// the parameter and the limit. At most MaxConcurrentDeltas deltas wait at
// once (429 with Retry-After beyond); the two builds of a delta take
// build slots like any profile, waiting for one if need be. The wait ends
// when the request's context does (the client went away, or the server
// cancelled it, as the probe's own listener does when the probe stops:
// 503), and the handler returns at once. Without ?seconds none of this
// runs.
func Handler(ledger *finalizerwatch.Watcher) http.Handler {
	if ledger == nil {
		ledger = finalizerwatch.Default
	}
	return &handler{
		build:        func(w io.Writer) error { return Write(w, ledger) },
		buildSampled: func(w io.Writer) error { return WriteSampled(w, ledger) },
		sem:          make(chan struct{}, MaxConcurrentBuilds),
		delta:        ledgerDelta(ledger),
		deltas:       make(chan struct{}, MaxConcurrentDeltas),
	}
}

type handler struct {
	build        func(io.Writer) error // Write of the ledger; a hook for tests
	buildSampled func(io.Writer) error // WriteSampled of the ledger; nil for none
	sem          chan struct{}         // one token per build in progress
	filename     string                // the download's name; "" for finalizers.pb.gz
	delta        delta                 // how to take ?seconds; nil for not at all
	deltas       chan struct{}         // one token per delta waiting (delta.go)
	waiting      func()                // a test's hook: a delta took its earlier profile
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	q := r.URL.Query()
	debug, _ := strconv.Atoi(q.Get("debug"))
	if r.Method == http.MethodHead {
		if debug != 0 {
			setTextHeaders(w.Header())
		} else {
			h.setDownloadHeaders(w.Header())
		}
		w.WriteHeader(http.StatusOK)
		return
	}
	if q.Has(DeltaParam) {
		h.serveDelta(w, r, q.Get(DeltaParam), debug) // delta.go
		return
	}
	select {
	case h.sem <- struct{}{}:
		defer func() { <-h.sem }()
	default:
		w.Header().Set("Retry-After", strconv.Itoa(RetryAfterSeconds))
		http.Error(w, "too many profiles being built; retry later", http.StatusServiceUnavailable)
		return
	}
	// Build into memory first, so that a failure can still be reported
	// with a status code rather than as a truncated download.
	var buf bytes.Buffer
	build := h.build
	if q.Get("sampled") == "1" && h.buildSampled != nil {
		build = h.buildSampled
	}
	if err := build(&buf); err != nil {
		http.Error(w, "building the profile failed", http.StatusInternalServerError)
		return
	}
	if debug != 0 {
		writeTextResponse(w, &buf)
		return
	}
	h.writeDownload(w, &buf)
}

// writeDownload answers with the encoded profile in buf, as a download.
func (h *handler) writeDownload(w http.ResponseWriter, buf *bytes.Buffer) {
	h.setDownloadHeaders(w.Header())
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(http.StatusOK)
	_, _ = buf.WriteTo(w) // the client went away: nothing to do
}

// writeTextResponse answers with the profile encoded in buf as text
// (WriteText).
func writeTextResponse(w http.ResponseWriter, buf *bytes.Buffer) {
	prof, err := profile.Parse(buf)
	if err != nil {
		http.Error(w, "decoding the profile failed", http.StatusInternalServerError)
		return
	}
	writeText(w, prof)
}

// writeText answers with prof as text (WriteText).
func writeText(w http.ResponseWriter, prof *profile.Profile) {
	var text bytes.Buffer
	_ = WriteText(&text, prof) // a bytes.Buffer never fails
	setTextHeaders(w.Header())
	w.Header().Set("Content-Length", strconv.Itoa(text.Len()))
	w.WriteHeader(http.StatusOK)
	_, _ = text.WriteTo(w)
}

func setTextHeaders(h http.Header) {
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
}

func (h *handler) setDownloadHeaders(hd http.Header) {
	name := h.filename
	if name == "" {
		name = "finalizers.pb.gz"
	}
	hd.Set("Content-Type", "application/octet-stream")
	hd.Set("Content-Disposition", `attachment; filename="`+name+`"`)
	hd.Set("X-Content-Type-Options", "nosniff")
}
