package analyzer_test

import (
	"fmt"
	"strings"

	"golang.org/x/tools/go/analysis/multichecker"

	"github.com/gcprobe/probe/cmd/finalizercheck/analyzer"
)

// The Analyzer's name is the one its diagnostics and flags carry.
func Example() {
	a := analyzer.Analyzer
	summary, _, _ := strings.Cut(a.Doc, "\n")
	fmt.Println(a.Name+":", summary)
	// Output: finalizercheck: report runtime.SetFinalizer and runtime.AddCleanup calls that bypass finalizerwatch
}

// A vet tool of your own can run finalizercheck with other analyzers:
// this is its main function.
func Example_multichecker() {
	main := func() {
		multichecker.Main(analyzer.Analyzer /*, other analyzers... */)
	}
	_ = main
}
