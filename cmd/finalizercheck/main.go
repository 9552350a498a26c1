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
	if slices.ContainsFunc(os.Args[1:], isHelpFlag) {
		// The checker's own usage follows (and exits); it knows nothing
		// of the other modes, and calls its -tags a no-op.
		fmt.Fprint(os.Stderr, modesUsage)
	}
	singlechecker.Main(analyzer.Analyzer)
}

// modesUsage heads -h: the three modes, and how build tags reach each.
const modesUsage = `finalizercheck has three modes:

  finalizercheck [-fix [-diff]] packages
	report (and, with -fix, rewrite) the runtime.SetFinalizer and
	runtime.AddCleanup calls of your own code; the rewritten code imports
	github.com/gcprobe/probe/finalizerwatch, so its module must require
	github.com/gcprobe/probe (-fix says so when it does not)
  finalizercheck -deps DIR [-tags list] [packages]
	watch the calls in your dependencies (module cache included) through
	a -modfile and -overlay it writes to DIR; prints the go flags to
	build with (finalizercheck -deps -h for more)
  finalizercheck -runtime DIR [-tags list] [-overlay file]
	count every registration in the binary, the standard library's too,
	through a patched runtime; prints the go flags (-runtime -h for more)

Build tags: -deps and -runtime take -tags. In the first mode the -tags
listed below is the analysis driver's and has no effect: pass tags as
GOFLAGS=-tags=list finalizercheck ... (the go command reads GOFLAGS).

`

// isHelpFlag reports whether a is -h, -help or --help.
func isHelpFlag(a string) bool {
	switch a {
	case "-h", "-help", "--help", "--h":
		return true
	}
	return false
}
