package pprofexporter

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/google/pprof/profile"
)

// Delta profiles: ?seconds=N, as continuous profilers ask for a custom
// path with delta on (Grafana Alloy's pyroscope.scrape, Parca), and as
// net/http/pprof answers it for allocs and heap. The handler takes the
// profile, waits N seconds, takes it again and answers the difference:
// a counter (a count since the start) becomes what it counted over the N
// seconds, a gauge (a state: outstanding, in use) is the later value.
// Nothing of it runs unless the query has seconds.

// Paths at which the profiles are served, by the probe's own listener
// and in the examples: mount Handler at FinalizersPath and the allocation
// profile at AllocsPath.
const (
	FinalizersPath = "/debug/pprof/finalizers"
	AllocsPath     = "/debug/pprof/gcprobe-allocs"
)

const (
	// MaxDeltaSeconds is the longest delta a handler takes: ?seconds
	// above it is refused (400). A handler served by an http.Server with
	// a WriteTimeout refuses, as net/http/pprof does, seconds that are
	// not below it: the answer could not be written in time.
	MaxDeltaSeconds = 300
	// MaxConcurrentDeltas is how many delta requests a handler lets wait
	// at once; one more gets 429 Too Many Requests with a Retry-After
	// header at once rather than another goroutine that waits, so that a
	// storm of scrapers cannot pile them up. Continuous profilers scrape
	// a target once per interval: a few at once is plenty.
	MaxConcurrentDeltas = 4
)

// DeltaParam is the query parameter of a delta profile.
const DeltaParam = "seconds"

// delta is how a handler takes a delta profile: begin takes the earlier
// profile (or the start of its window) and returns end, which takes the
// later one and returns the difference. sampled is ?sampled=1.
type delta func(sampled bool) (end func() (*profile.Profile, error), err error)

// maxDeltaSeconds returns the largest ?seconds r may ask for, and why it
// is that: the server's WriteTimeout, if r's server has one below
// MaxDeltaSeconds.
func maxDeltaSeconds(r *http.Request) (int, string) {
	srv, ok := r.Context().Value(http.ServerContextKey).(*http.Server)
	if ok && srv.WriteTimeout > 0 && srv.WriteTimeout <= MaxDeltaSeconds*time.Second {
		// Below the timeout: N = WriteTimeout in whole seconds is refused.
		n := int(math.Ceil(srv.WriteTimeout.Seconds())) - 1
		return n, fmt.Sprintf("below the server's WriteTimeout of %v", srv.WriteTimeout)
	}
	return MaxDeltaSeconds, "MaxDeltaSeconds"
}

// parseSeconds reads ?seconds: an integer from 1 to the maximum
// (maxDeltaSeconds), else a message for a 400 that names the parameter
// and the limit.
func parseSeconds(r *http.Request, raw string) (int, string) {
	limit, why := maxDeltaSeconds(r)
	n, err := strconv.Atoi(raw)
	if err != nil || n <= 0 || n > limit {
		if limit < 1 {
			return 0, fmt.Sprintf("%s=%q: no delta fits %s", DeltaParam, raw, why)
		}
		return 0, fmt.Sprintf("%s=%q: want an integer from 1 to %d (%s)", DeltaParam, raw, limit, why)
	}
	return n, ""
}

// serveDelta answers ?seconds=raw: the profile's delta over that many
// seconds, as a download or, with debug, as text.
func (h *handler) serveDelta(w http.ResponseWriter, r *http.Request, raw string, debug int) {
	if h.delta == nil {
		http.Error(w, DeltaParam+" is not supported by this handler", http.StatusBadRequest)
		return
	}
	n, msg := parseSeconds(r, raw)
	if msg != "" {
		http.Error(w, msg, http.StatusBadRequest)
		return
	}
	select {
	case h.deltas <- struct{}{}:
		defer func() { <-h.deltas }()
	default:
		w.Header().Set("Retry-After", strconv.Itoa(n))
		http.Error(w, fmt.Sprintf("too many delta profiles waiting (at most %d at once); retry later", MaxConcurrentDeltas),
			http.StatusTooManyRequests)
		return
	}
	ctx := r.Context()
	d := time.Duration(n) * time.Second
	sampled := r.URL.Query().Get("sampled") == "1"
	start := time.Now()
	var end func() (*profile.Profile, error)
	err := h.building(ctx, func() (err error) {
		end, err = h.delta(sampled)
		return err
	})
	if err != nil {
		h.deltaFailed(w, ctx, err)
		return
	}
	if h.waiting != nil {
		h.waiting()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		h.deltaFailed(w, ctx, ctx.Err())
		return
	}
	var prof *profile.Profile
	err = h.building(ctx, func() (err error) {
		prof, err = end()
		return err
	})
	if err != nil {
		h.deltaFailed(w, ctx, err)
		return
	}
	prof.TimeNanos = start.UnixNano()
	prof.DurationNanos = d.Nanoseconds()
	prof.Comments = append(prof.Comments, fmt.Sprintf("gcprobe: delta over %d s (?%s=%d): counters are what they counted in that time, gauges their value at its end", n, DeltaParam, n))
	if debug != 0 {
		writeText(w, prof)
		return
	}
	var buf bytes.Buffer
	if err := prof.Write(&buf); err != nil {
		http.Error(w, "encoding the delta profile failed", http.StatusInternalServerError)
		return
	}
	h.writeDownload(w, &buf)
}

// building runs build holding one of the handler's build slots, waiting
// for one until ctx ends: the waiting is bounded by MaxConcurrentDeltas.
func (h *handler) building(ctx context.Context, build func() error) error {
	select {
	case h.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-h.sem }()
	return build()
}

// deltaFailed answers a delta that could not be made: 503 naming the
// cause if ctx was cancelled (the server that mounted the handler stops,
// say; a client that went away reads no answer), 500 if a build failed.
func (h *handler) deltaFailed(w http.ResponseWriter, ctx context.Context, err error) {
	if cause := context.Cause(ctx); cause != nil {
		http.Error(w, "delta profile cancelled: "+cause.Error(), http.StatusServiceUnavailable)
		return
	}
	http.Error(w, "building the delta profile failed: "+err.Error(), http.StatusInternalServerError)
}

// diff returns later with its counters (the sample types in counters)
// less what earlier had at the same sample key (stack and labels): what
// they counted in between. Gauges keep later's value. A counter lower
// than before (the entry was reset, or folded away and back) counts from
// zero: later's value. Samples whose values are all zero are dropped, and
// the profile compacted. later is changed and returned.
func diff(earlier, later *profile.Profile, counters map[string]bool) *profile.Profile {
	isCounter := make([]bool, len(later.SampleType))
	for i, st := range later.SampleType {
		isCounter[i] = counters[st.Type]
	}
	before := make(map[string][]int64, len(earlier.Sample))
	for _, s := range earlier.Sample {
		k := sampleKey(s)
		if v, ok := before[k]; ok { // one key twice: sum, as pprof would
			for i := range v {
				v[i] += s.Value[i]
			}
			continue
		}
		before[k] = slices.Clone(s.Value)
	}
	kept := later.Sample[:0]
	for _, s := range later.Sample {
		if v, ok := before[sampleKey(s)]; ok {
			for i := range s.Value {
				if isCounter[i] && i < len(v) && s.Value[i] >= v[i] {
					s.Value[i] -= v[i]
				}
			}
		}
		if slices.ContainsFunc(s.Value, func(v int64) bool { return v != 0 }) {
			kept = append(kept, s)
		}
	}
	clear(later.Sample[len(kept):])
	later.Sample = kept
	if c := later.Compact(); c != nil { // nil only if pprof's Merge fails
		return c
	}
	return later
}

// ledgerCounters are the sample types of Profile and SampledProfile that
// count since the start (finalizerwatch's counters that are not gauges,
// and dropped); the others (outstanding, suspect, growth, leaked) are
// states, which a delta profile gives as they are at its end.
var ledgerCounters = func() map[string]bool {
	m := map[string]bool{SampleDropped: true}
	for _, c := range finalizerwatch.Counters() {
		if !c.Gauge {
			m[c.Name] = true
		}
	}
	return m
}()

// ledgerDelta is the delta of Handler: Profile (or SampledProfile) before
// and after, diffed.
func ledgerDelta(ledger *finalizerwatch.Watcher) delta {
	return func(sampled bool) (func() (*profile.Profile, error), error) {
		take := func() *profile.Profile {
			if sampled {
				return SampledProfile(ledger)
			}
			return Profile(ledger)
		}
		before := take()
		return func() (*profile.Profile, error) { return diff(before, take(), ledgerCounters), nil }, nil
	}
}

// sampleKey identifies a sample across two profiles of one process: its
// locations' addresses and lines, and its labels.
func sampleKey(s *profile.Sample) string {
	var b strings.Builder
	for _, l := range s.Location {
		b.WriteString(strconv.FormatUint(l.Address, 16))
		for _, ln := range l.Line {
			b.WriteByte('|')
			if ln.Function != nil {
				b.WriteString(ln.Function.Name)
				b.WriteByte(' ')
				b.WriteString(ln.Function.Filename)
			}
			b.WriteByte(':')
			b.WriteString(strconv.FormatInt(ln.Line, 10))
		}
		b.WriteByte(';')
	}
	keys := make([]string, 0, len(s.Label))
	for k := range s.Label {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(strings.Join(s.Label[k], ","))
		b.WriteByte(';')
	}
	return b.String()
}
