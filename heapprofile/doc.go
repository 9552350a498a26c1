// Package heapprofile names the lines that make the GC work: the call
// sites that allocated most over the latest window, and the sites whose
// in-use bytes keep growing, read from the Go runtime's own heap profile
// (runtime.MemProfile) by deltas between samples.
//
// A Profiler reads runtime.MemProfile into a slice it reuses, keeps each
// stack's previous cumulative counts, and sums the differences by site:
// the first frame in the user's or a dependency's code (not the runtime's,
// the standard library's or gcprobe's, as package stackcapture classes
// them), with the stack below it. Reading the profile takes the profiler's
// locks bucket by bucket, never the world. It is its own package, not part
// of memstats, because it needs stackcapture's classification and memstats
// imports nothing of gcprobe's.
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
//	for _, s := range p.Snapshot().Allocating {
//		fmt.Println(s.Site, s.AllocBytesPerSecond)
//	}
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
// copy; the world never stops. A profile of more than WithMaxBuckets
// buckets (DefaultMaxBuckets) is not read, and the skip is counted
// (Snapshot.Skipped), rather than holding that much memory; the top lists
// are bounded by WithTopK.
//
// # Concurrency
//
// All exported functions and methods are safe for concurrent use unless
// specified otherwise. Sample holds the profiler's lock for a read;
// Snapshot copies under it.
package heapprofile
