package main

import (
	"os"
	"slices"

	"golang.org/x/tools/go/analysis/singlechecker"

	"github.com/gcprobe/probe/cmd/finalizercheck/analyzer"
)

func main() {
	if slices.ContainsFunc(os.Args[1:], isDepsFlag) {
		os.Exit(depsMain(os.Args[1:], os.Stdout, os.Stderr))
	}
	singlechecker.Main(analyzer.Analyzer)
}
