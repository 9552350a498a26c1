package pprofexporter

import (
	"io"
	"strconv"

	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/google/pprof/profile"
)

// SampledProfile returns the profile of ledger's sampled registration
// stacks (finalizerwatch.Snapshot.StackSamples): one sample per distinct
// stack through which a sampled registration was made, of either kind,
// valued by the outstanding and registered registrations it stands for
// (outstanding is the default). Those values are estimates: the sampled
// counts scaled by the sample rate, which the profile says in a comment
// ("stacks sampled: one registration in N"). Where Profile shows one stack
// per site (its first registration's), this one shows the paths through
// which a site registers, weighted, as the heap profile does for
// allocations. It is empty if the ledger samples no stacks (rate 0, or
// WithFullStacks, where Profile has every stack exactly). A nil ledger
// means finalizerwatch.Default.
func SampledProfile(ledger *finalizerwatch.Watcher) *profile.Profile {
	b := sampledBuilder(ledger)
	defer b.release()
	return b.decode()
}

// sampledBuilder returns a builder holding the sampled profile of ledger
// (nil for finalizerwatch.Default).
func sampledBuilder(ledger *finalizerwatch.Watcher) *builder {
	if ledger == nil {
		ledger = finalizerwatch.Default
	}
	b := newBuilder(sampledTypes, SampleOutstanding)
	rate := ledger.StackSampleRate()
	var sn finalizerwatch.Snapshot
	ledger.Read(&sn, finalizerwatch.ReadOptions{StackSamples: true, Unranked: true})
	for _, s := range sn.StackSamples {
		rate = s.Rate
		b.addFrames(s.Kind, s.Stack, []int64{clampInt64(s.Outstanding), clampInt64(s.Registered)})
	}
	b.comments = []string{"stacks sampled: one registration in " + strconv.Itoa(rate) + "; counts are the sampled ones scaled by " + strconv.Itoa(rate)}
	return b
}

// sampledTypes are SampledProfile's sample types.
var sampledTypes = []string{SampleOutstanding, SampleRegistered}

// WriteSampled writes SampledProfile(ledger) to w, gzipped, as Write does.
func WriteSampled(w io.Writer, ledger *finalizerwatch.Watcher) error {
	b := sampledBuilder(ledger)
	defer b.release()
	return b.writeGzipped(w, "sampled profile")
}
