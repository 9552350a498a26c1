// Package heapprofile names the lines that make the GC work: the call
// sites that allocated most over the latest window, and the sites whose
// in-use bytes keep growing, read from the Go runtime's own heap profile
// (runtime.MemProfile) by deltas between samples.
//
// A Profiler reads runtime.MemProfile into a slice it reuses, keeps each
// stack's previous cumulative counts, and sums the differences by site.
// Reading the profile takes the profiler's locks bucket by bucket, never
// the world. It is its own package, not part of memstats, because it
// needs stackcapture's classification and memstats imports nothing of
// gcprobe's.
//
// # Usage
//
//	p, err := heapprofile.New(heapprofile.WithInterval(10 * time.Second))
//	if err != nil {
//		return err
//	}
//	if err := p.Start(); err != nil {
//		return err
//	}
//	defer p.Stop()
//	...
//	sn := p.Snapshot()
//	if msg := sn.StatusText(); msg != "" {
//		fmt.Println(msg) // off, overflowing, or not read yet
//		return nil
//	}
//	for _, s := range sn.Allocating {
//		fmt.Println(s.PathString(), s.AllocBytesPerSecond) // rw.go:50 → io.copyBuffer 2.4e+06
//	}
//
// # Sites and paths
//
// A stack's site is a line someone can change, never the runtime's
// (package runtime, runtime/internal/..., internal/runtime/..., or a
// function the runtime implements under another package's name, such as
// reflect.unsafe_New). It is, in order:
//
//   - the first frame in the user's or a dependency's code, as package
//     stackcapture classes frames (stackcapture.OriginOf is OriginUser):
//     not the standard library's, gcprobe's or a compiler wrapper's;
//   - if the stack has none, its first frame outside the runtime: the
//     standard library's (net/http's connection goroutines allocate with
//     no user frame on the stack; so does an encoding/gob init storing
//     into a sync.Map), or gcprobe's own. A public package's frame is
//     preferred to the standard library's internal ones: the site is
//     sync.(*Map).Store, and the internal/sync functions it called are
//     its path;
//   - if even that is missing, one site for all such stacks, RuntimeSite,
//     with no file and no line (the runtime's own goroutines).
//
// "First" counts from the allocation outward, over the frames each return
// PC expands into, inlined calls included. Sites are keyed by their line:
// stacks through one line are one site.
//
// In gcprobe's runtime build mode (finalizercheck -runtime) the runtime
// ends a sampled allocation's stack, after runtime.goexit, with the line
// that caused the allocating goroutine, its origin, while a probe is
// attached. A stack that only the standard library runs (net/http's
// connection goroutines) then has the program's frame that started it,
// and that is its site, with the standard library's frames as its path:
// "main.go:42 → net/http.(*conn).serve → … → net/textproto.readMIMEHeader".
//
// A site's Path is the way from the site down to the allocation: the
// frames between them that are outside the runtime, innermost last, so
// that a site calling io.Copy that allocates in io.copyBuffer has the path
// io.Copy, io.copyBuffer, and Site.PathString renders it on one line
// ("responsewriter.go:50 → io.Copy → io.copyBuffer", at most MaxPathHops
// frames, cut with "…"). Stacks that reach one line by different paths
// are one site, with one Stack (the site and its callers) and one Path:
// those of the stack that allocated most through the line in the window
// in which the site was first reported, kept from then on. Stacks and
// paths are symbolized then, when a site is first reported, not when the
// profile is read.
//
// # Signatures
//
// WithSignatures names families of allocations by the functions on their
// stacks (a Signature: "heapprofile.allocLeaf" called, further out, from
// "heapprofile.callerOfLeaf"), and each snapshot sums, per signature, what
// the matching stacks allocated over the window and hold now, their share
// of the whole profile's (Snapshot.TotalAllocBytes, TotalInUseBytes), and
// the line responsible (SignatureStat.Site: the first frame outward of
// the last matched one in the main module, else in the user's or a
// dependency's code; of the lines the matching stacks go through, the one
// that allocated most in the window). A stack counts toward every
// signature it matches.
// Matching symbolizes a stack once, when its bucket is first seen, and
// keeps the result as a bit mask in the bucket: a read then only adds.
//
// # When no line can be named
//
// Snapshot.Status says whether the latest read named the allocating lines
// (StatusOK) or why not, and Snapshot.StatusText says it in a sentence a
// report can print in place of the sites:
//
//   - StatusOff: runtime.MemProfileRate is 0, and the runtime records
//     nothing ("the heap profile is off (runtime.MemProfileRate = 0): no
//     allocating line can be named");
//   - StatusOverflow: the profile holds more buckets than the bound (see
//     Cost and bounds).
//
// Either way the lists and the signatures' figures are emptied at once,
// so that an older window never reads as the current one.
//
// # What the runtime's sampling means
//
// The runtime records one allocation per runtime.MemProfileRate bytes
// allocated on average (512 KiB by default), the whole object counted when
// it is picked; the profiler scales each stack's counts back up as pprof
// does. At the default rate a site allocating small objects appears once
// it has allocated about 512 KiB: at 2.4 MB/s that is a few samples a
// second, plenty over a 10 s window, but a site allocating 10 KiB a second
// shows in roughly one window in five, and its figure is a rough estimate.
// Set runtime.MemProfileRate lower, once, early in main, for finer figures
// at a higher cost per allocation; 0 turns the profile, and this package,
// off. The runtime publishes the profile as of the latest completed GC
// cycle, so a window with no cycle shows no allocation.
//
// # Cost and bounds
//
// A read is proportional to the profile's buckets (one per distinct
// allocation stack): each record is 288 bytes, copied by the runtime, then
// hashed and looked up here. The benchmark in this package measures a read
// at 1k, 10k and 100k buckets: about 35-60 µs, 0.45-0.8 ms and 5.5-10 ms
// on a shared 2-core amd64 VM (50-100 ns a bucket), nothing allocated in
// steady state. The runtime holds its profile lock while it copies the
// records, so the GC's end-of-cycle flush of the profile may wait for the
// copy; the world never stops. A profile of more buckets than the bound,
// WithMaxBuckets (DefaultMaxBuckets), is not read: the read is an overflow
// (Snapshot.Status, the skip counted in Snapshot.Skipped), and the
// profiler doubles its bound for the next read, up to a ceiling of
// BoundCeiling (4) times WithMaxBuckets: each bucket of the bound costs
// RecordBytes (288 bytes) once read, so the ceiling holds 18 MiB of
// records at the default. The next read that fits covers the skipped window too, the counts being
// cumulative; past the ceiling, every read is an overflow. The top lists
// are bounded by WithTopK. Signatures cost a symbolization of each new
// stack, and per read a few additions per matching bucket (the benchmark
// has cases with four).
//
// # Top lists: a K of their own
//
// Allocating and Growing hold at most WithTopK sites each (DefaultTopK,
// 10). That K is not the one of gcprobe's other readers
// (finalizerwatch.DefaultTopK, the probe's WithTopK), on purpose:
//
//   - It ranks other things: heap-profile sites by the bytes they
//     allocated over the window or grew over the latest windows, where the
//     ledger's top K ranks finalizer and cleanup sites by the leak model.
//     A bound on how many finalizer sites get series of their own says
//     nothing about how many allocating lines are worth naming.
//   - The profiler makes its cut itself, at each read, and this package
//     neither reads the ledger nor imports finalizerwatch: a program can
//     run a Profiler without a Watcher.
//   - It has a ceiling, MaxTopK: each read inserts every site into both
//     lists at up to K steps a site, so K is paid per read, times the
//     profile's sites; the ledger's K has no ceiling (a probe's WithTopK
//     of a million is valid), so the probe does not forward it here.
//
// Each reader of the lists bounds what it shows itself: the Prometheus
// exporter at most its own top K of each list (its cardinality bound,
// promexporter.WithTopK), the probe's Report and the reconcile spans the
// first few sites, the allocs profile every site the lists hold. Set this
// K with WithTopK, in a probe through probe.WithHeapProfileOptions.
//
// # Concurrency
//
// All exported functions and methods are safe for concurrent use unless
// specified otherwise. Sample holds the profiler's lock for a read;
// Snapshot copies under it.
package heapprofile
