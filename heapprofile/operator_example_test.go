package heapprofile_test

import (
	"fmt"
	"math"

	"github.com/gcprobe/probe/heapprofile"
)

// An operator's own GC causes: a profiler that sums the operator
// signatures, judged with what the program knows of itself. Here the
// environment is spelled out: an operator in a container limited to
// 512 MiB, with GOMEMLIMIT unset.
func ExampleJudgeOperator() {
	p, err := heapprofile.New(heapprofile.WithSignatures(heapprofile.OperatorSignatures()...))
	if err != nil {
		fmt.Println(err)
		return
	}
	p.Sample()
	env := heapprofile.OperatorEnv{ // in a program: heapprofile.ReadOperatorEnv(), and Running
		LinksKubernetes:   true,
		MemoryLimit:       math.MaxInt64,
		CgroupMemoryLimit: 512 << 20,
	}
	for _, c := range heapprofile.JudgeOperator(p.Snapshot(), env) {
		fmt.Println(c.Name)
		fmt.Println(c.Fix)
	}
	// Output:
	// gomemlimit_unset
	// set GOMEMLIMIT=460MiB (90% of the limit) in the container's environment, or call debug.SetMemoryLimit with it at start
}
