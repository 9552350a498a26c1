package memstats

import (
	"bytes"
	"os"
	"strconv"
)

// The kernel's pressure stall information for the CPU (Linux 4.20 and
// later): the cgroup's own file when the process runs in a cgroup v2 (a
// container's CPU limit starves it there even on an idle node), else the
// system's. Elsewhere, or when neither is readable, it is unknown.
var pressureFiles = [...]string{"/sys/fs/cgroup/cpu.pressure", "/proc/pressure/cpu"}

// readCPUPressure returns the "some avg10" figure, as a fraction: the share
// of the latest ten seconds in which some runnable thread waited for a CPU.
func readCPUPressure() (float64, bool) {
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
	return 0, false
}

// parsePressure reads "some avg10=1.23 avg60=... total=..." from the first
// line of a pressure file, as a fraction.
func parsePressure(b []byte) (float64, bool) {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	rest, ok := bytes.CutPrefix(line, []byte("some "))
	if !ok {
		return 0, false
	}
	for _, field := range bytes.Fields(rest) {
		if v, ok := bytes.CutPrefix(field, []byte("avg10=")); ok {
			p, err := strconv.ParseFloat(string(v), 64)
			if err != nil || p < 0 {
				return 0, false
			}
			return min(p/100, 1), true
		}
	}
	return 0, false
}
