package bench

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gcprobe/probe"
	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/internal/ledgertest"
)

// Ledgers of many entries, for the memory the probe takes at 10 000 call
// sites and for the exporters' cost at scale. Two shapes:
//
//   - sites: n distinct lines of code, each registering. Distinct lines
//     need source: bench/internal/gensites writes them, and bench/run.sh
//     compiles them in through -overlay with the build tag gcprobe_sites,
//     so that the repository holds the generator, not 10 000 lines. Without
//     it, generatedSites is 0 and the benchmarks that need them skip.
//   - stacks: n distinct full stacks (WithFullStacks) reaching one line
//     through recursion whose shape spells out the entry's number: a
//     ledger entry per stack, which is what costs memory, but a single
//     site once the exporters merge them.

// siteObj is what the site benchmarks register on.
type siteObj struct {
	p *int
	_ [48]byte
}

func finalizeSiteObj(*siteObj) {}
func cleanupSiteObj(int)       {}

// stackBits is the recursion depth of the stacks shape: 2^14 > 10 000
// distinct stacks, 15 frames deep plus the caller's, under
// stackcapture.MaxDepth.
const stackBits = 14

// atStack calls fn below a recursion of depth frames, each entering the
// next through one of two call sites by one bit of id: distinct ids,
// distinct stacks.
//
//go:noinline
func atStack(id, depth int, fn func()) {
	if depth == 0 {
		fn()
		return
	}
	if id&1 == 0 {
		atStack(id>>1, depth-1, fn)
		return
	}
	atStack(id>>1, depth-1, fn)
}

// registerEntry registers o with w as ledger entry i of shape l: even
// entries set a finalizer, odd ones add a cleanup (whose handle it
// returns; the zero Cleanup for a finalizer).
func registerEntry(w *finalizerwatch.Watcher, l ledgerShape, o *siteObj, i int) (c finalizerwatch.Cleanup) {
	switch {
	case l.stacks:
		atStack(i, stackBits, func() {
			if i%2 == 0 {
				w.SetFinalizer(o, finalizeSiteObj)
			} else {
				c = finalizerwatch.AddCleanupTo(w, o, cleanupSiteObj, 0)
			}
		})
	case l.n == 1:
		w.SetFinalizer(o, finalizeSiteObj)
	default:
		c = registerAtSite(w, o, i)
	}
	return c
}

// registerRaw registers o as registerEntry would, with the runtime's
// functions: the same objects and callbacks, no ledger.
func registerRaw(l ledgerShape, o *siteObj, i int) (c runtime.Cleanup) {
	register := func() {
		if i%2 == 0 || l.n == 1 {
			runtime.SetFinalizer(o, finalizeSiteObj)
		} else {
			c = runtime.AddCleanup(o, cleanupSiteObj, 0)
		}
	}
	if l.stacks {
		atStack(i, stackBits, register)
	} else {
		register()
	}
	return c
}

// rssShapes are the ledgers BenchmarkSitesRSS measures.
var rssShapes = []ledgerShape{{false, 10_000}, {true, 10_000}}

// BenchmarkSitesRSS measures what a probe tracking 10 000 ledger entries
// holds in memory, against the same program registering through the
// runtime (mode=none). Each iteration registers one object per entry and
// keeps it (outstanding, as a leak's objects are), runs the probe's
// readers once (a Prometheus gather, a report, a profile: what a scraped
// process has done, and what symbolizes the stacks), then returns freed
// memory to the OS and reads:
//
//	rss-MiB         VmRSS
//	heap-MiB        bytes in live heap objects
//	go-mapped-MiB   memory the runtime holds from the OS and has not released
//
// The deltas between modes are only meaningful between fresh processes,
// one mode each: bench/run.sh runs them so, with -benchtime=1x. Set
// GCPROBE_HEAPPROFILE to see where the probe's memory goes.
func BenchmarkSitesRSS(b *testing.B) {
	for _, l := range rssShapes {
		for _, mode := range []string{"none", "probe"} {
			b.Run(l.name()+"/mode="+mode, func(b *testing.B) {
				if !l.stacks && l.n > generatedSites {
					b.Skipf("needs %d generated sites, this build has %d: run bench/run.sh, which generates them", l.n, generatedSites)
				}
				var m memReading
				for range b.N {
					var err error
					if mode == "none" {
						m, err = rssNone(l)
					} else {
						m, err = rssProbe(l)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				if m.rss > 0 {
					b.ReportMetric(float64(m.rss)/(1<<20), "rss-MiB")
				}
				b.ReportMetric(float64(m.heap)/(1<<20), "heap-MiB")
				b.ReportMetric(float64(m.mapped)/(1<<20), "go-mapped-MiB")
			})
		}
	}
}

// heapProfileEnv names a file to which BenchmarkSitesRSS's probe mode
// writes a heap profile at the moment it measures, to see where the
// memory goes: GCPROBE_HEAPPROFILE=/tmp/heap.pprof, then
// go tool pprof -sample_index=inuse_space.
const heapProfileEnv = "GCPROBE_HEAPPROFILE"

func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// memReading is the process's memory after a full GC that returned freed
// memory to the OS.
type memReading struct{ rss, heap, mapped uint64 }

func readMemory() memReading {
	runtime.GC()
	debug.FreeOSMemory() // another GC, then returns every free page
	r := readRuntime()
	rss, _ := processRSS()
	return memReading{rss: rss, heap: r.heapObjects(), mapped: r.mappedNotReleased()}
}

func rssNone(l ledgerShape) (memReading, error) {
	objs := make([]*siteObj, l.n)
	cs := make([]runtime.Cleanup, l.n)
	for i := range objs {
		objs[i] = new(siteObj)
		cs[i] = registerRaw(l, objs[i], i)
	}
	m := readMemory()
	for i, o := range objs {
		if cs[i] == (runtime.Cleanup{}) {
			runtime.SetFinalizer(o, nil)
		} else {
			cs[i].Stop()
		}
	}
	return m, nil
}

func rssProbe(l ledgerShape) (memReading, error) {
	profile := os.Getenv(heapProfileEnv)
	if profile != "" {
		runtime.MemProfileRate = 4096
	}
	opts := []finalizerwatch.Option{finalizerwatch.WithMaxSites(2 * l.n), finalizerwatch.WithMaxStacks(2 * l.n)}
	if l.stacks {
		opts = append(opts, finalizerwatch.WithFullStacks(true))
	}
	w, err := finalizerwatch.New(opts...)
	if err != nil {
		return memReading{}, err
	}
	defer w.Close()
	reg := prometheus.NewRegistry()
	p, err := probe.Start(probe.WithRegisterer(reg), probe.WithWatcher(w))
	if err != nil {
		return memReading{}, err
	}
	defer p.Stop()

	objs := make([]*siteObj, l.n)
	cs := make([]finalizerwatch.Cleanup, l.n)
	for i := range objs {
		objs[i] = new(siteObj)
		cs[i] = registerEntry(w, l, objs[i], i)
	}
	if got := len(ledgertest.Entries(w)); got < l.n {
		return memReading{}, fmt.Errorf("%d ledger entries, want %d", got, l.n)
	}
	// What a scraped, inspected process has done.
	if _, err := reg.Gather(); err != nil {
		return memReading{}, err
	}
	_ = p.Report()
	rec := httptest.NewRecorder()
	p.ProfileHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, probe.ProfilePath, nil))
	if rec.Code != http.StatusOK {
		return memReading{}, fmt.Errorf("profile: %d %s", rec.Code, rec.Body)
	}

	m := readMemory()
	if profile != "" {
		if err := writeHeapProfile(profile); err != nil {
			return m, err
		}
	}
	for i, o := range objs {
		if cs[i] == (finalizerwatch.Cleanup{}) {
			w.SetFinalizer(o, nil)
		} else {
			cs[i].Stop()
		}
	}
	return m, p.Stop()
}

// TestLedgerShapes checks that the shapes yield the ledger entries they
// promise: one per stack, and one per generated line when the build has
// them.
func TestLedgerShapes(t *testing.T) {
	n := 300
	if raceEnabled {
		n = 64
	}
	shapes := []ledgerShape{{true, n}, {false, 1}}
	if generatedSites >= n {
		shapes = append(shapes, ledgerShape{false, n})
	}
	for _, l := range shapes {
		t.Run(l.name(), func(t *testing.T) {
			opts := []finalizerwatch.Option{finalizerwatch.WithMaxSites(4 * n), finalizerwatch.WithMaxStacks(4 * n)}
			if l.stacks {
				opts = append(opts, finalizerwatch.WithFullStacks(true))
			}
			w := newWatcher(t, opts...)
			objs := make([]*siteObj, l.n)
			cs := make([]finalizerwatch.Cleanup, l.n)
			for i := range objs {
				objs[i] = new(siteObj)
				cs[i] = registerEntry(w, l, objs[i], i)
			}
			if got := len(ledgertest.Entries(w)); got != l.n {
				t.Errorf("%d ledger entries, want %d", got, l.n)
			}
			wantSites := l.n
			if l.stacks {
				wantSites = 2 // every stack reaches the finalizer line or the cleanup line
			}
			if got := len(ledgertest.Sites(w)); got != wantSites {
				t.Errorf("%d sites, want %d", got, wantSites)
			}
			if ov := ledgertest.Overflow(w); ov.Sites != 0 || ov.Stacks != 0 {
				t.Errorf("overflow %+v, want none", ov)
			}
			for i, o := range objs {
				if cs[i] == (finalizerwatch.Cleanup{}) {
					w.SetFinalizer(o, nil)
				} else {
					cs[i].Stop()
				}
			}
		})
	}
}
