package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"golang.org/x/tools/go/analysis/singlechecker"

	"github.com/gcprobe/probe/cmd/finalizercheck/analyzer"
)

func main() {
	if code, ok := modeMain(os.Args[1:], os.Stdout, os.Stderr); ok {
		os.Exit(code)
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

// modeMain runs the -runtime or the -deps mode, or the view command, when
// args (the command line without the program name) ask for one, and
// returns its exit status and true; otherwise it returns false and the
// checker runs.
func modeMain(args []string, stdout, stderr io.Writer) (int, bool) {
	switch {
	case len(args) > 0 && args[0] == viewCommand:
		// A word, not a flag: view serves, it does not build. (A package
		// named view in the current directory is ./view to the checker.)
		return runView(args[1:], stdout, stderr), true
	case slices.ContainsFunc(args, isRuntimeFlag):
		return runtimeMain(args, stdout, stderr), true
	case slices.ContainsFunc(args, isDepsFlag):
		// The -deps parser takes the word after -deps as its directory
		// whatever it is: check that word first, as the -runtime
		// parser does, so that -deps -h prints help instead of
		// preparing a build in ./-h.
		if err := checkModeDir("-deps", modeDir(args, isDepsFlag)); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fmt.Fprint(stderr, depsUsage)
				return 0, true
			}
			fmt.Fprintf(stderr, "finalizercheck -deps: %v\n", err)
			return 1, true
		}
		return depsMain(args, stdout, stderr), true
	}
	return 0, false
}

// checkModeDir checks the word a mode flag (-runtime, -deps) takes as its
// directory. The flag package gives a string flag the next word whatever
// it looks like, so "finalizercheck -runtime -h", which -h itself
// suggests, would prepare the mode in a directory named "-h". A help
// flag there asks for the mode's usage (flag.ErrHelp); any other word
// that begins with "-" is refused, and a directory so named is still
// reachable as ./-name.
func checkModeDir(mode, dir string) error {
	if !strings.HasPrefix(dir, "-") {
		return nil
	}
	if isHelpFlag(dir) {
		return flag.ErrHelp
	}
	return fmt.Errorf("%s takes a directory, not the flag %s: finalizercheck %s DIR ... "+
		"(%s -h for help; a directory whose name begins with '-' goes as ./%s)", mode, dir, mode, mode, dir)
}

// modeDir returns the value that args give the first mode flag for which
// is reports true (-deps DIR or -deps=DIR), or "" if there is none.
func modeDir(args []string, is func(string) bool) string {
	for i, a := range args {
		if !is(a) {
			continue
		}
		if _, v, ok := strings.Cut(a, "="); ok {
			return v
		}
		if i+1 < len(args) {
			return args[i+1]
		}
		return ""
	}
	return ""
}

// modesUsage heads -h: the three modes, and how build tags reach each.
const modesUsage = `finalizercheck has three modes, and a command:

  finalizercheck [-fix [-diff]] packages
	report (and, with -fix, rewrite) the runtime.SetFinalizer and
	runtime.AddCleanup calls of your own code; the rewritten code imports
	github.com/gcprobe/probe/finalizerwatch, so its module must require
	github.com/gcprobe/probe (-fix says so when it does not)
  finalizercheck -deps DIR [-tags list] [packages]
	watch the calls in your dependencies (module cache included) through
	a -modfile and -overlay it writes to DIR; prints the go flags to
	build with (finalizercheck -deps -h for more)
  finalizercheck -runtime DIR [-start [-gcprobe DIR]] [-tags list] [-overlay file]
	count every registration in the binary, the standard library's too,
	through a patched runtime; prints the go flags (-runtime -h for more);
	with -start, also link and start the probe in the main module's main
	packages when GCPROBE_LISTEN is set, with no change to their source
  finalizercheck view [-token-file FILE | -kubeconfig FILE | ...] [-ca-file FILE | -insecure-skip-verify] URL
	open the live page of a program behind an authenticating metrics
	server (controller-runtime's secure one) in a browser: a proxy on
	loopback adds your bearer token to every request it forwards to URL,
	and prints the page's local address (finalizercheck view -h for more)

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
