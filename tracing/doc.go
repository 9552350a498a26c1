// Package tracing reports gcprobe's findings as OpenTelemetry spans: a
// periodic leak report naming the call sites whose finalizers and cleanups
// stay outstanding, a span per GC pause over a threshold, and a span per
// batch of GC detector events. It uses the OpenTelemetry API only; the
// program chooses the SDK and exporter (exporters/otlp builds one from the
// standard OTEL_* environment). The controller-runtime Reconciler wrapper
// lives in the subpackage reconciletrace, so that this package pulls in no
// Kubernetes code.
//
// # Usage
//
//	s, err := memstats.New()
//	if err != nil {
//		return err
//	}
//	if err := s.Start(); err != nil {
//		return err
//	}
//	defer s.Stop()
//	r, err := tracing.New(
//		tracing.WithTracerProvider(tp), // default otel.GetTracerProvider()
//		tracing.WithSampler(s),
//		tracing.WithLeakReportInterval(time.Minute),
//	)
//	if err != nil {
//		return err
//	}
//	if err := r.Start(); err != nil {
//		return err
//	}
//	defer r.Stop()
//
// Run(ctx) instead of Start suits callers that manage their own goroutines
// (manager.RunnableFunc(r.Run) in controller-runtime). ReportNow emits one
// leak report and ReportPauses the pending pause spans on demand, running
// or not.
//
// # Lifecycle
//
// A Reporter runs once: idle after New, running after Start or Run,
// stopped after Stop or once a Run's context ends, for good. Start or Run
// on a running reporter returns an error wrapping ErrRunning; on a stopped
// one, an error wrapping ErrStopped (make a new Reporter). Stop is
// idempotent and works in any state. memstats.Sampler and the root
// package's Probe follow the same rules.
//
// # Concurrency
//
// All exported functions and methods are safe for concurrent use unless
// specified otherwise. A running reporter owns one goroutine, which Stop
// ends and waits for. Spans are created on that goroutine, or on the caller
// of ReportNow and ReportPauses, never on the sampler's: the detector
// handler the reporter subscribes only queues the event (at most
// DefaultDetectorQueue of them; more are counted as dropped) and wakes the
// reporter without blocking.
//
// # Spans
//
// Every span is of kind Internal, from the tracer named ScopeName; none
// sets a status. Counts are int64 attributes, durations int64 nanoseconds
// (suffix _ns), sizes int64 bytes (suffix _bytes).
//
// gcprobe.leak_report (SpanLeakReport): emitted every leak report interval
// and by ReportNow; its duration is the time taken to build the report.
//
//	gcprobe.top_k                      the configured top K
//	gcprobe.suspect_cycles             the watcher's suspect threshold in GC cycles
//	gcprobe.sites_reported             number of gcprobe.site events
//	gcprobe.more_cycles_needed         GC cycles still to pass before the growth model can tell
//	                                   a leak from a cache (0: enough have passed)
//	gcprobe.finalizers.sites           sites with finalizers; likewise gcprobe.cleanups.*
//	gcprobe.finalizers.<counter>       each counter of finalizerwatch.Counters, summed over every
//	                                   site (gcprobe.finalizers.registered, ...; as at a site, below)
//	gcprobe.finalizers.suspect         outstanding that survived suspect_cycles cycles
//	gcprobe.finalizers.cycles          GC cycles the finalizer goroutine caught up with
//	                                   (the clock ages are measured in)
//	with a sampler that has sampled:
//	gcprobe.gc.cycles                  completed GC cycles (memstats Snapshot.Cycles)
//	gcprobe.heap.live_bytes            heap marked live by the latest cycle
//	gcprobe.finalizers.queue_length    finalizers queued and not yet run
//	gcprobe.cleanups.queue_length      cleanups queued and not yet run
//	gcprobe.detectors.active           names of the detectors firing now (string slice)
//
// One gcprobe.site event (EventSite) per site of the ledger's top top_k
// (finalizerwatch.Snapshot.Top) that has outstanding registrations, or
// whose files or connections were dropped without Close (runtime build
// mode), in the ranking's order (most likely leak first):
//
//	code.function.name                 function of the registration site (package path-qualified)
//	code.file.path                     its file
//	code.line.number                   its line
//	code.stacktrace                    the registration stack, innermost first, as a Go panic
//	                                   prints it: "function\n\tfile:line\n" per frame (FormatStack)
//	gcprobe.kind                       "finalizer" or "cleanup"
//	gcprobe.resource                   what the standard library registered there, "os.File",
//	                                   "net.Conn", ... (runtime build mode; absent otherwise)
//	gcprobe.<counter>                  each counter of finalizerwatch.Counters, named and meaning
//	                                   what it says (gcprobe.registered, gcprobe.executed,
//	                                   gcprobe.outstanding, ...; docs/metrics.md lists them)
//	gcprobe.suspect                    outstanding that survived the suspect threshold
//	gcprobe.max_cycles_survived        GC cycles the oldest outstanding registration survived
//	                                   (finalizerwatch.AgeBuckets-1 means at least that many)
//	gcprobe.class                      "growing" (a leak, or a cache still filling), "stable"
//	                                   (long-lived but flat: a cache or pool) or "churn"; see
//	                                   finalizerwatch.Snapshot.Top
//	gcprobe.growth                     suspects gained over the growth model's window, what
//	                                   growing sites rank by
//
// The code.* names are the OpenTelemetry semantic conventions' (1.30 and
// later).
//
// gcprobe.gc_pause (SpanGCPause): one per GC cycle whose stop-the-world
// time is at least the pause threshold (DefaultPauseThreshold). It ends
// when the cycle's last pause ended and lasts as long as the cycle's pauses
// together: the runtime reports the sum of a cycle's two pauses (sweep
// termination and mark termination), so the length is exact and the start
// approximate.
//
//	gcprobe.gc.cycle                   the cycle's number (1 for the first)
//	gcprobe.gc.pause_ns                the cycle's stop-the-world time
//	with a sampler that has sampled, figures read when the reporter polled,
//	which is after the pause:
//	gcprobe.gc.sampled_cycle           latest cycle when the figures below were read
//	gcprobe.heap.live_before_bytes     heap marked live by the previous cycle, if a poll saw it
//	gcprobe.heap.live_after_bytes      heap marked live by this cycle, if a poll saw it
//	gcprobe.finalizers.queue_length    finalizer queue length at the poll
//	gcprobe.cleanups.queue_length      cleanup queue length at the poll
//
// The live heap is the runtime's /gc/heap/live:bytes, known only as of the
// latest completed cycle when the sampler samples; the reporter remembers
// it per cycle at each poll, so before and after are present only when a
// poll happened between the cycles concerned. Pauses are read from the
// sampler's pause history (memstats.Sampler.PausesSince), which it fills
// on each sampling round; the reporter polls it every pause poll interval.
//
// gcprobe.detector (SpanDetector): emitted when the sampler's detectors
// fire or resolve (memstats.Sampler.Subscribe), one span per batch the
// reporter picks up (usually one event), from the first event to when it
// was emitted.
//
//	gcprobe.detector.events            number of gcprobe.detector events on the span
//	gcprobe.detector.dropped           events dropped since the previous span (queue full)
//
// Each gcprobe.detector event (EventDetector), timestamped at the sampling
// round that produced it:
//
//	gcprobe.detector.name              the detector (memstats.Detector* constants)
//	gcprobe.detector.value             the observed value (double; unit per detector)
//	gcprobe.detector.threshold         the configured threshold (double)
//	gcprobe.detector.since             when the condition began to hold (RFC 3339, UTC)
//	gcprobe.detector.firing            true when it fires, false when it resolves
//	gcprobe.detector.kind              finalizer_blocked only: "finalizer" or "cleanup"
//	gcprobe.detector.site              finalizer_blocked only: the blocking callback's site, "function file:line"
//	gcprobe.detector.cause             a cause detector firing (memstats.CauseDetectors): the cause in words
//	                                   with the number that decided it (memstats.Event.Cause)
//	gcprobe.detector.fix               a firing cause's fix in words (memstats.Event.Fix)
//
// Detector events get a short span of their own rather than joining a leak
// report: leak reports are instants minutes apart, and an event should
// reach the backend when it happens.
package tracing
