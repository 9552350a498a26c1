package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gcprobe/probe/finalizerwatch"
)

// The operator-like workload. Workers (MaxConcurrentReconciles) take
// reconcile requests from a shared counter, the stand-in for a workqueue.
// Each reconcile decodes an object of about 12 KB from JSON, deep-copies
// it, updates and encodes its status (the patch it would send), and:
//
//   - on 1 in 4 objects sets a finalizer, on 1 in 4 adds a cleanup;
//   - keeps 1 in 8 objects in a cache of the last cacheSize (an informer
//     cache or an LRU of clients), so registered objects live for a few GC
//     cycles before they are dropped;
//   - every pressureEvery reconciles allocates and touches pressureBytes,
//     a burst such as a list call or a large response.
//
// Nothing in a reconcile depends on wall time, so every mode does the same
// work per reconcile and only the registration path differs.
const (
	defaultWorkers = 4
	registerEvery  = 4 // i%registerEvery: 0 sets a finalizer, 1 adds a cleanup
	keepEvery      = 8 // (i/4)%keepEvery == 0 is kept in the cache
	cacheSize      = 256
	pressureEvery  = 512
	pressureBytes  = 4 << 20
)

// registrar is how the workload registers finalizers and cleanups: the
// runtime's functions, or finalizerwatch's drop-ins. Both go through one
// interface call so that the modes differ only in what is behind it.
type registrar interface {
	setFinalizer(o *Object)
	addCleanup(o *Object, handle int)
}

type rawRegistrar struct{}

func (rawRegistrar) setFinalizer(o *Object)      { runtime.SetFinalizer(o, finalizeObject) }
func (rawRegistrar) addCleanup(o *Object, h int) { runtime.AddCleanup(o, releaseHandle, h) }

// watchedRegistrar registers through the package-level drop-ins, into
// finalizerwatch.Default, which probe.Start reports by default.
type watchedRegistrar struct{}

func (watchedRegistrar) setFinalizer(o *Object) {
	finalizerwatch.SetFinalizer(o, finalizeObject) // marker: workload finalizer
}

func (watchedRegistrar) addCleanup(o *Object, h int) {
	finalizerwatch.AddCleanup(o, releaseHandle, h) // marker: workload cleanup
}

// Process-wide counts of the workload's registrations and of the
// finalizers and cleanups that ran, so that a run can wait until every
// callback it caused has run before the next one starts.
var (
	finalizersSet, finalizersRun atomic.Uint64
	cleanupsAdded, cleanupsRun   atomic.Uint64
)

// finalizeObject and releaseHandle stand in for closing a connection or
// releasing a handle.
func finalizeObject(*Object) { finalizersRun.Add(1) }
func releaseHandle(int)      { cleanupsRun.Add(1) }

// objectCache keeps the last cacheSize objects stored in it.
type objectCache struct {
	mu   sync.Mutex
	objs [cacheSize]*Object
	next int
}

func (c *objectCache) put(o *Object) {
	c.mu.Lock()
	c.objs[c.next] = o
	c.next = (c.next + 1) % len(c.objs)
	c.mu.Unlock()
}

func (c *objectCache) clear() {
	c.mu.Lock()
	c.objs = [cacheSize]*Object{}
	c.mu.Unlock()
}

// workload is the operator-like workload with its fixtures and cache.
type workload struct {
	workers  int
	reg      registrar
	fixtures [][]byte
	cache    objectCache
}

func newWorkload(reg registrar, workers int) *workload {
	return &workload{workers: workers, reg: reg, fixtures: fixtures()}
}

// workerState is one worker's latency histogram and counts; each worker
// owns one, so recording takes no lock.
type workerState struct {
	hist       latencyHist
	finalizers uint64
	cleanups   uint64
	patchBytes int
	err        error
}

// runStats is what run measured.
type runStats struct {
	reconciles int
	wall       time.Duration
	latency    latencyHist
	finalizers uint64 // set by this run
	cleanups   uint64 // added by this run
}

// run performs n reconciles on the workload's workers and returns the
// merged latencies.
func (wl *workload) run(n int) (runStats, error) {
	var next atomic.Int64
	states := make([]*workerState, wl.workers)
	for i := range states {
		states[i] = new(workerState)
	}
	var wg sync.WaitGroup
	start := time.Now()
	for _, st := range states {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				t0 := time.Now()
				if err := wl.reconcile(i, st); err != nil {
					st.err = err
					return
				}
				st.hist.record(time.Since(t0))
			}
		})
	}
	wg.Wait()
	rs := runStats{reconciles: n, wall: time.Since(start)}
	var errs []error
	for _, st := range states {
		rs.latency.merge(&st.hist)
		rs.finalizers += st.finalizers
		rs.cleanups += st.cleanups
		errs = append(errs, st.err)
	}
	finalizersSet.Add(rs.finalizers)
	cleanupsAdded.Add(rs.cleanups)
	return rs, errors.Join(errs...)
}

// reconcile is one reconcile of request i.
func (wl *workload) reconcile(i int, st *workerState) error {
	var obj Object
	if err := json.Unmarshal(wl.fixtures[i%len(wl.fixtures)], &obj); err != nil {
		return fmt.Errorf("reconcile %d: %w", i, err)
	}
	out := obj.DeepCopy()

	// The reconciler's own logic: bring the status up to date and encode
	// the patch it would send.
	out.Metadata.Labels["example.com/last-reconcile"] = strconv.Itoa(i)
	out.Status.ObservedGeneration = out.Metadata.Generation
	out.Status.Replicas = out.Spec.Replicas
	for c := range out.Status.Conditions {
		out.Status.Conditions[c].Message = out.Status.Conditions[c].Type + " at generation " +
			strconv.FormatInt(out.Metadata.Generation, 10) + " by request " + strconv.Itoa(i)
	}
	patch, err := json.Marshal(&out.Status)
	if err != nil {
		return fmt.Errorf("reconcile %d: %w", i, err)
	}
	st.patchBytes += len(patch)

	switch i % registerEvery {
	case 0:
		wl.reg.setFinalizer(out)
		st.finalizers++
	case 1:
		wl.reg.addCleanup(out, i)
		st.cleanups++
	}
	if (i/4)%keepEvery == 0 {
		wl.cache.put(out)
	}
	if i%pressureEvery == pressureEvery-1 {
		burst()
	}
	return nil
}

// burst allocates and touches pressureBytes, then drops them.
//
//go:noinline
func burst() {
	b := make([]byte, pressureBytes)
	for j := 0; j < len(b); j += 4096 {
		b[j] = 1
	}
	runtime.KeepAlive(b)
}

// drain drops the cache and runs GC until every finalizer and cleanup the
// workload ever registered has run, so that nothing a run caused spills
// into the next one. It gives up after timeout.
// Not testkit.AwaitGC: it returns an error, which benchmarkOperator reports with b.Error and then still stops its environment.
func (wl *workload) drain(timeout time.Duration) error {
	wl.cache.clear()
	deadline := time.Now().Add(timeout)
	for finalizersRun.Load() < finalizersSet.Load() || cleanupsRun.Load() < cleanupsAdded.Load() {
		if time.Now().After(deadline) {
			return fmt.Errorf("after %v: %d of %d finalizers and %d of %d cleanups ran", timeout,
				finalizersRun.Load(), finalizersSet.Load(), cleanupsRun.Load(), cleanupsAdded.Load())
		}
		runtime.GC()
		runtime.Gosched() // let the finalizer and cleanup goroutines run
	}
	return nil
}
