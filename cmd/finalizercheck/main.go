package main

import (
	"golang.org/x/tools/go/analysis/singlechecker"

	"github.com/gcprobe/probe/cmd/finalizercheck/analyzer"
)

func main() {
	singlechecker.Main(analyzer.Analyzer)
}
