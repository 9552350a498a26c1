// Command leakdemo plants a finalizer leak, a cleanup leak and a slow
// finalizer among healthy traffic and a stable cache, and shows gcprobe
// finding each of them: a live table every few seconds, Prometheus metrics
// and a pprof profile on loopback. The leaks are classed growing and lead
// the table; the cache, thousands of long-lived objects, is classed stable
// and ranks below them.
//
//	go run ./examples/leakdemo                 # until Ctrl-C
//	go run ./examples/leakdemo -duration 30s
//
// While it runs, the live page is at http://127.0.0.1:6061/debug/gcprobe/, and
//
//	go tool pprof -top -lines http://127.0.0.1:6061/debug/pprof/finalizers
//	curl -s http://127.0.0.1:6061/metrics | grep gcprobe_finalizers_growing
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/gcprobe/probe"
	"github.com/gcprobe/probe/finalizerwatch"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:6061", "where to serve /metrics and /debug/pprof/finalizers (loopback only: it is unauthenticated)")
	duration := flag.Duration("duration", 0, "stop after this long (0: run until interrupted)")
	every := flag.Duration("every", 3*time.Second, "how often to print the table")
	topK := flag.Int("topk", probe.DefaultTopK, "sites (of either kind, most likely to leak first) with Prometheus series of their own")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}
	if err := run(ctx, os.Stdout, *addr, *every, *topK, timedPacer{}); err != nil {
		fmt.Fprintln(os.Stderr, "leakdemo:", err)
		os.Exit(1)
	}
}

// demoSuspectAge is the demo's suspect age: its leaks are named within
// half a minute. A server keeps probe.DefaultSuspectAge (30 s), which
// no pool warming up or batch of start-up files outlasts.
const demoSuspectAge = 10 * time.Second

// run runs the demo until ctx ends, printing to out, its queue trouble at
// pace's pace.
func run(ctx context.Context, out io.Writer, addr string, every time.Duration, topK int, pace queuePacer) error {
	if every <= 0 {
		return errors.New("-every must be > 0")
	}
	p, err := probe.Start(probe.WithListenAddr(addr), probe.WithTopK(topK), probe.WithSuspectAge(demoSuspectAge))
	if err != nil {
		return err
	}
	defer p.Stop()
	fillConfigCache()
	base := "http://" + p.Addr().String()
	fmt.Fprintf(out, "serving %s/metrics and %s/debug/pprof/finalizers\n", base, base)
	fmt.Fprintf(out, "the live page: %s/debug/gcprobe/\n", base)
	fmt.Fprintf(out, "find the leaking lines with:\n  go tool pprof -top -lines %s/debug/pprof/finalizers\n\n", base)

	var wg sync.WaitGroup
	queue := func(ctx context.Context) { queueTrouble(ctx, pace) }
	for _, work := range []func(context.Context){sessions, buffers, slowFiles, healthy, queue} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			work(ctx)
		}()
	}
	defer wg.Wait()

	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			fmt.Fprintln(out, "stopping")
			return nil
		case <-tick.C:
			if _, err := fmt.Fprintln(out, p.Report()); err != nil {
				return err
			}
		}
	}
}

// every runs fn every d until ctx ends.
func every(ctx context.Context, d time.Duration, fn func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}

// session stands for a per-connection object with a native resource.
type session struct {
	id   int
	peer *session
	buf  [256]byte
}

// sessionCache is the leak: sessions go in and never come out.
var (
	cacheMu      sync.Mutex
	sessionCache = map[int]*session{}
)

// sessions plants the finalizer leak: every session's finalizer is set,
// but one in ten is cached forever, so its finalizer never runs.
func sessions(ctx context.Context) {
	id := 0
	every(ctx, 20*time.Millisecond, func() {
		id++
		s := &session{id: id}
		finalizerwatch.SetFinalizer(s, func(s *session) { /* close the native handle */ }) // leak: finalizer
		if id%10 == 0 {
			cacheMu.Lock()
			sessionCache[id] = s
			cacheMu.Unlock()
		}
	})
}

// config stands for an entry of a cache that is filled once and then
// kept: thousands of long-lived objects, healthy.
type config struct {
	name string
	_    [128]byte
}

var (
	configOnce  sync.Once
	configCache []*config
)

// fillConfigCache plants the stable cache: 3000 objects with finalizers,
// filled at start and never grown. Its site has more suspects than either
// leak for minutes, and is classed stable, below them.
func fillConfigCache() {
	configOnce.Do(func() {
		for i := range 3000 {
			c := &config{name: fmt.Sprint("config-", i)}
			finalizerwatch.SetFinalizer(c, func(*config) {}) // stable: cache
			configCache = append(configCache, c)
		}
	})
}

type buffer struct {
	data []byte
	_    *int
}

// handle is what a buffer's cleanup releases. It points back at its
// buffer: a cleanup whose argument reaches its object can never run.
type handle struct {
	owner *buffer
}

// buffers plants the cleanup leak.
func buffers(ctx context.Context) {
	every(ctx, 50*time.Millisecond, func() {
		b := &buffer{data: make([]byte, 1<<10)}
		finalizerwatch.AddCleanup(b, func(h *handle) { h.owner = nil }, &handle{owner: b}) // leak: cleanup
	})
}

type file struct {
	fd  int
	buf [64]byte
}

// slowFiles plants a finalizer that takes 2 ms, in bursts of 600: after
// each burst the single finalizer goroutine is more than a second behind,
// the queue grows and its latency crosses the queue_latency detector's
// threshold, then it drains before the next burst.
func slowFiles(ctx context.Context) {
	every(ctx, 3*time.Second, func() {
		for i := range 600 {
			f := &file{fd: i}
			finalizerwatch.SetFinalizer(f, func(*file) { time.Sleep(2 * time.Millisecond) }) // slow finalizer
		}
		runtime.GC()
	})
}

type request struct {
	body [512]byte
	_    *int
}

// healthy is ordinary traffic: objects registered and dropped, their
// finalizers and cleanups run within a cycle or two.
func healthy(ctx context.Context) {
	every(ctx, 5*time.Millisecond, func() {
		for i := range 20 {
			r := &request{}
			if i%2 == 0 {
				finalizerwatch.SetFinalizer(r, func(*request) {}) // healthy: finalizer
			} else {
				finalizerwatch.AddCleanup(r, func(int) {}, i) // healthy: cleanup
			}
		}
	})
}
