package probe

import (
	"testing"
	"time"

	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/stackcapture"
)

// A line that forced many cycles at start-up and stopped is not named
// before the loop that forces them now, once a generation has passed.
func TestRecentForcedRanksByRecentCalls(t *testing.T) {
	warm := stackcapture.Frame{Function: "main.warmUp", File: "/app/main.go", Line: 10}
	loop := stackcapture.Frame{Function: "main.loop", File: "/app/loop.go", Line: 20}
	var r recentForced
	t0 := time.Unix(1000, 0)
	at := func(warmCalls, loopCalls uint64) []finalizerwatch.ForcedGCSite {
		return []finalizerwatch.ForcedGCSite{{Site: warm, Calls: warmCalls}, {Site: loop, Calls: loopCalls}}
	}
	// At first every call since the process began counts.
	got, since := r.rank(at(500, 5), t0)
	if !since.IsZero() || len(got) != 2 || got[0].Site != warm {
		t.Fatalf("first: %+v since %v", got, since)
	}
	// A generation on: the counts of then are the base.
	got, since = r.rank(at(500, 65), t0.Add(forcedGeneration))
	if !since.Equal(t0) || len(got) != 1 || got[0].Site != loop || got[0].Calls != 60 {
		t.Fatalf("a generation on: %+v since %v, want the loop's 60 calls since %v", got, since, t0)
	}
	// Within the generation the base stays.
	got, _ = r.rank(at(500, 95), t0.Add(forcedGeneration+30*time.Second))
	if len(got) != 1 || got[0].Calls != 90 {
		t.Fatalf("within it: %+v", got)
	}
}
