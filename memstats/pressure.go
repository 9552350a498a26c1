package memstats

import (
	"bytes"
	"os"
	"runtime/metrics"
	"strconv"
	"sync"
	"time"
)

// The kernel's pressure stall information for the CPU (Linux 4.20 and
// later): the cgroup's own file when the process runs in a cgroup v2 (a
// container's CPU limit starves it there even on an idle node), else the
// system's. Elsewhere, or when neither is readable, it is unknown.
var pressureFiles = [...]string{"/sys/fs/cgroup/cpu.pressure", "/proc/pressure/cpu"}

// cpuPressure is one read of a pressure file's "some" line: the share of
// the latest ten seconds in which some runnable thread waited for a CPU
// (avg10, as a fraction), and the total time it did, in microseconds.
type cpuPressure struct {
	avg10 float64
	total uint64
}

// readCPUPressure reads the first pressure file that can be read.
func readCPUPressure() (cpuPressure, bool) {
	var buf [256]byte
	for _, name := range pressureFiles {
		f, err := os.Open(name)
		if err != nil {
			continue
		}
		n, _ := f.Read(buf[:])
		f.Close()
		if v, ok := parsePressure(buf[:n]); ok {
			return v, true
		}
	}
	return cpuPressure{}, false
}

// parsePressure reads "some avg10=1.23 avg60=... total=..." from the first
// line of a pressure file.
func parsePressure(b []byte) (cpuPressure, bool) {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	rest, ok := bytes.CutPrefix(line, []byte("some "))
	if !ok {
		return cpuPressure{}, false
	}
	var p cpuPressure
	var seen int
	for _, field := range bytes.Fields(rest) {
		if v, ok := bytes.CutPrefix(field, []byte("avg10=")); ok {
			f, err := strconv.ParseFloat(string(v), 64)
			if err != nil || f < 0 {
				return cpuPressure{}, false
			}
			p.avg10, seen = min(f/100, 1), seen+1
		}
		if v, ok := bytes.CutPrefix(field, []byte("total=")); ok {
			t, err := strconv.ParseUint(string(v), 10, 64)
			if err != nil {
				return cpuPressure{}, false
			}
			p.total, seen = t, seen+1
		}
	}
	if seen != 2 {
		return cpuPressure{}, false
	}
	return p, true
}

// pressureSince is the share of the time since the previous read, prev at
// then, in which some thread waited for a CPU, from the totals: it follows
// a neighbour that starts now, where avg10 takes seconds to rise. With no
// usable previous read (none, one too close, or one older than avg10's ten
// seconds: it is read only while stopping_latency's condition holds, and a
// read hours old would dilute a neighbour that starts now), avg10.
func pressureSince(prev, cur cpuPressure, elapsed time.Duration) float64 {
	if elapsed < 100*time.Millisecond || elapsed > 10*time.Second || cur.total < prev.total || prev.total == 0 {
		return cur.avg10
	}
	return min(float64(cur.total-prev.total)/float64(elapsed.Microseconds()), 1)
}

// runWaitTotal is the runtime's record of how long runnable goroutines
// waited for a CPU (/sched/latencies): the waits, summed at each bucket's
// midpoint, and how many there were.
type runWaitTotal struct {
	sec float64
	n   uint64
}

// newRunWaitReader returns a function that reads /sched/latencies into a
// sample of its own, reused: the sampling round's read does not carry the
// histogram.
func newRunWaitReader() func() runWaitTotal {
	var mu sync.Mutex
	s := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	return func() runWaitTotal {
		mu.Lock()
		defer mu.Unlock()
		metrics.Read(s)
		var t runWaitTotal
		if s[0].Value.Kind() != metrics.KindFloat64Histogram {
			return t
		}
		h := s[0].Value.Float64Histogram()
		for j, c := range h.Counts {
			t.n += c
			t.sec += float64(c) * midpoint(h.Buckets[j], h.Buckets[j+1])
		}
		return t
	}
}

// waitSince is the mean wait since the previous read; 0 with no usable
// previous read (none, or one more than ten seconds old, like
// pressureSince's).
func waitSince(prev, cur runWaitTotal, elapsed time.Duration) time.Duration {
	if elapsed > 10*time.Second || prev.n == 0 || cur.n <= prev.n {
		return 0
	}
	return secondsDuration((cur.sec - prev.sec) / float64(cur.n-prev.n))
}
