package main

import (
	"fmt"
	"os"
	"slices"

	"golang.org/x/tools/go/analysis/singlechecker"

	"github.com/gcprobe/probe/cmd/finalizercheck/analyzer"
)

func main() {
	if slices.ContainsFunc(os.Args[1:], isRuntimeFlag) {
		os.Exit(runtimeMain(os.Args[1:], os.Stdout, os.Stderr))
	}
	if slices.ContainsFunc(os.Args[1:], isDepsFlag) {
		os.Exit(depsMain(os.Args[1:], os.Stdout, os.Stderr))
	}
	if fixMode(os.Args[1:]) {
		// The checker's -fix mode applies what it can and says nothing
		// of the rest: report it, and fail.
		self, err := os.Executable()
		if err != nil {
			fmt.Fprintln(os.Stderr, "finalizercheck:", err)
			os.Exit(1)
		}
		os.Exit(fixAndReport(os.Stdout, os.Stderr, self, os.Args[1:]))
	}
	singlechecker.Main(analyzer.Analyzer)
}
