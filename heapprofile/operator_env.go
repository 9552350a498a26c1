package heapprofile

import (
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
)

// kubernetesModules are the modules whose presence in the binary makes it
// an operator for JudgeOperator.
var kubernetesModules = []string{"k8s.io/client-go", "sigs.k8s.io/controller-runtime"}

// linksKubernetes caches LinksKubernetes' answer: the build information
// does not change while the program runs.
var linksKubernetes = sync.OnceValue(func() bool {
	bi, ok := debug.ReadBuildInfo()
	return ok && buildLinksKubernetes(bi)
})

// LinksKubernetes reports whether the running binary links k8s.io/client-go
// or sigs.k8s.io/controller-runtime, as its build information
// (debug.ReadBuildInfo) lists its modules: whether the operator causes
// apply to it.
func LinksKubernetes() bool { return linksKubernetes() }

// buildLinksKubernetes is LinksKubernetes on bi.
func buildLinksKubernetes(bi *debug.BuildInfo) bool {
	for _, m := range kubernetesModules {
		if bi.Main.Path == m {
			return true
		}
		for _, d := range bi.Deps {
			if d.Path == m || (d.Replace != nil && d.Replace.Path == m) {
				return true
			}
		}
	}
	return false
}

// ReadOperatorEnv returns the running program's OperatorEnv, but for
// Running, which the caller knows: whether it links client-go or
// controller-runtime, its Go memory limit and its container's.
func ReadOperatorEnv() OperatorEnv {
	return OperatorEnv{
		LinksKubernetes:   LinksKubernetes(),
		MemoryLimit:       debug.SetMemoryLimit(-1),
		CgroupMemoryLimit: cgroupMemoryLimit(os.ReadFile),
	}
}

// The files that hold the container's memory limit, as a container sees
// its own cgroup at /sys/fs/cgroup: cgroup v2's memory.max ("max" for
// none), then cgroup v1's memory.limit_in_bytes (a number near
// math.MaxInt64, rounded down to a page, for none).
const (
	cgroupV2MemoryMax = "/sys/fs/cgroup/memory.max"
	cgroupV1MemoryMax = "/sys/fs/cgroup/memory/memory.limit_in_bytes"
)

// cgroupUnlimited: a v1 limit at or above it means none (the kernel
// writes PAGE_COUNTER_MAX pages, 9223372036854771712 bytes with 4 KiB
// pages).
const cgroupUnlimited = 1 << 62

// cgroupMemoryLimit returns the container's memory limit in bytes, read
// with read; 0 for none, or when neither file can be read or parsed.
func cgroupMemoryLimit(read func(name string) ([]byte, error)) int64 {
	for _, name := range []string{cgroupV2MemoryMax, cgroupV1MemoryMax} {
		b, err := read(name)
		if err != nil {
			continue
		}
		s := strings.TrimSpace(string(b))
		if s == "max" {
			return 0
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 || n >= cgroupUnlimited {
			return 0
		}
		return n
	}
	return 0
}
