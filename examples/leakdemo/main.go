// Command leakdemo plants a finalizer leak, a cleanup leak and a slow
// finalizer among healthy traffic, and shows gcprobe finding each of them:
// a live table every few seconds, Prometheus metrics and a pprof profile on
// loopback.
//
//	go run ./examples/leakdemo                 # until Ctrl-C
//	go run ./examples/leakdemo -duration 30s
//
// While it runs:
//
//	go tool pprof -top http://127.0.0.1:6061/debug/pprof/finalizers
//	curl -s http://127.0.0.1:6061/metrics | grep gcprobe_finalizers_suspect_objects
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
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}
	if err := run(ctx, os.Stdout, *addr, *every); err != nil {
		fmt.Fprintln(os.Stderr, "leakdemo:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer, addr string, every time.Duration) error {
	if every <= 0 {
		return errors.New("-every must be > 0")
	}
	p, err := probe.Start(probe.WithListenAddr(addr))
	if err != nil {
		return err
	}
	defer p.Stop()
	base := "http://" + p.Addr().String()
	fmt.Fprintf(out, "serving %s/metrics and %s/debug/pprof/finalizers\n", base, base)
	fmt.Fprintf(out, "find the leaking lines with:\n  go tool pprof -top %s/debug/pprof/finalizers\n\n", base)

	var wg sync.WaitGroup
	for _, work := range []func(context.Context){sessions, buffers, slowFiles, healthy, queueTrouble} {
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
			r := p.Report()
			if _, err := r.WriteTo(out); err != nil {
				return err
			}
			fmt.Fprintln(out)
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
