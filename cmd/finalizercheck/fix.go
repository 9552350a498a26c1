package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
)

// fixPassEnv marks the child process that applies the fixes, so that it
// runs the plain checker instead of wrapping itself again.
const fixPassEnv = "GCPROBE_FINALIZERCHECK_FIX_PASS"

// noFixMarker is in the message of every diagnostic the analyzer reports
// without a suggested fix (see analyzer.reportFile).
const noFixMarker = "(no automatic fix: "

// fixMode reports whether args (without the program name) ask the checker
// to apply fixes: a -fix flag set to true before the first package pattern.
// -json output is left to the checker as it is.
func fixMode(args []string) bool {
	fix, js := false, false
	for _, a := range args {
		if a == "--" || !strings.HasPrefix(a, "-") {
			break
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		on := true
		if hasVal {
			b, err := strconv.ParseBool(val)
			on = err == nil && b
		}
		switch name {
		case "fix":
			fix = on
		case "json":
			js = on
		}
	}
	return fix && !js && os.Getenv(fixPassEnv) == ""
}

// unfixed is a diagnostic the checker reports without a fix.
type unfixed struct {
	file    string
	line    int
	message string
}

// fixAndReport runs the checker with args (which ask for -fix) as a child
// process, and then reports, on stderr, every call it left as it was, with
// its file, line and the reason, which the checker's -fix mode applies
// silently otherwise. It returns the exit status: the child's if it failed
// (1: errors), 3 if calls were left unfixed, 0 otherwise.
//
// The calls without a fix are found before the fixes are applied (after,
// the package may not build until the user requires finalizerwatch's
// module). Fixes only edit the import declarations above the code and
// replace a call's function in place, so a file's later lines move by the
// number of lines its import declarations gained or lost: the reported
// lines are those of the fixed file.
func fixAndReport(stdout, stderr io.Writer, self string, args []string) int {
	left, fixable, err := findUnfixed(self, args)
	if err != nil {
		fmt.Fprintf(stderr, "finalizercheck: looking for calls -fix cannot rewrite: %v\n", err)
	}
	before := lineCounts(left)

	cmd := exec.Command(self, args...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.Env = append(os.Environ(), fixPassEnv+"=1")
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		fmt.Fprintf(stderr, "finalizercheck: %v\n", err)
		return 1
	}
	if fixable > 0 && !diffMode(args) && !requiresGcprobe() {
		// The rewritten files import finalizerwatch, which the module
		// cannot build with until it requires gcprobe: say so, rather
		// than leave the user a build that fails later.
		fmt.Fprintf(stderr, "finalizercheck: rewrote %d call(s) to github.com/gcprobe/probe/finalizerwatch, which this module does not require yet: run\n\tgo get github.com/gcprobe/probe@latest\nthen build as before\n", fixable)
		if len(left) == 0 {
			return 0
		}
	}
	if len(left) == 0 {
		return 0
	}
	after := lineCounts(left)
	for _, u := range left {
		fmt.Fprintf(stderr, "%s:%d: %s\n", u.file, u.line+after[u.file]-before[u.file], u.message)
	}
	fmt.Fprintf(stderr, "finalizercheck: -fix left %d call(s) unfixed (above): rewrite them by hand\n", len(left))
	return 3
}

// findUnfixed runs the checker on args without -fix and -diff, with -json,
// and returns the diagnostics that have no fix, in file and line order. A
// package that does not load is left to the fix pass to report.
func findUnfixed(self string, args []string) (left []unfixed, fixable int, err error) {
	scan := []string{"-json"}
	for i, a := range args {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && a != "--" && (name == "fix" || name == "diff") {
			continue
		}
		if a == "--" || !strings.HasPrefix(a, "-") {
			scan = append(scan, args[i:]...)
			break
		}
		scan = append(scan, a)
	}
	cmd := exec.Command(self, scan...)
	cmd.Env = append(os.Environ(), fixPassEnv+"=1")
	var out bytes.Buffer
	cmd.Stdout = &out
	// Load errors (exit 1) come with JSON too; the fix pass reports them.
	if err := cmd.Run(); err != nil && out.Len() == 0 {
		return nil, 0, err
	}
	var tree map[string]map[string]json.RawMessage
	if err := json.Unmarshal(out.Bytes(), &tree); err != nil {
		return nil, 0, fmt.Errorf("reading the checker's -json output: %w", err)
	}
	for _, byAnalyzer := range tree {
		for _, raw := range byAnalyzer {
			var diags []struct {
				Posn    string `json:"posn"`
				Message string `json:"message"`
			}
			if json.Unmarshal(raw, &diags) != nil {
				continue // {"error": ...}: the package did not load
			}
			for _, d := range diags {
				if !strings.Contains(d.Message, noFixMarker) {
					fixable++
					continue
				}
				file, line, ok := fileLine(d.Posn)
				if !ok {
					return nil, 0, fmt.Errorf("unexpected position %q", d.Posn)
				}
				left = append(left, unfixed{file, line, d.Message})
			}
		}
	}
	sort.Slice(left, func(i, j int) bool {
		if left[i].file != left[j].file {
			return left[i].file < left[j].file
		}
		return left[i].line < left[j].line
	})
	return left, fixable, nil
}

// diffMode reports whether args ask for -diff (print the fixes, write
// nothing).
func diffMode(args []string) bool {
	for _, a := range args {
		if a == "--" || !strings.HasPrefix(a, "-") {
			break
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name == "diff" {
			b, err := strconv.ParseBool(val)
			return !hasVal || (err == nil && b)
		}
	}
	return false
}

// requiresGcprobe reports whether the module in the current directory can
// build finalizerwatch: go list finds the package (the module requires
// gcprobe, or is gcprobe, or a workspace provides it). When go list
// cannot tell (no go command), it answers true: say nothing rather than
// something wrong.
func requiresGcprobe() bool {
	// -mod=readonly and GOPROXY=off: look, never add a requirement or
	// reach the network.
	cmd := exec.Command("go", "list", "-mod=readonly", "-e", "-f", "{{if .Error}}missing{{end}}", "github.com/gcprobe/probe/finalizerwatch")
	cmd.Env = append(os.Environ(), "GOPROXY=off")
	out, err := cmd.Output()
	if err != nil {
		return true
	}
	return !strings.Contains(string(out), "missing")
}

// fileLine splits a "file:line:column" position.
func fileLine(posn string) (string, int, bool) {
	i := strings.LastIndexByte(posn, ':')
	if i < 0 {
		return "", 0, false
	}
	j := strings.LastIndexByte(posn[:i], ':')
	if j < 0 {
		return "", 0, false
	}
	line, err := strconv.Atoi(posn[j+1 : i])
	return posn[:j], line, err == nil
}

// lineCounts returns the number of lines of each file named in left.
func lineCounts(left []unfixed) map[string]int {
	n := map[string]int{}
	for _, u := range left {
		if _, ok := n[u.file]; ok {
			continue
		}
		b, err := os.ReadFile(u.file)
		if err == nil {
			n[u.file] = bytes.Count(b, []byte("\n"))
		}
	}
	return n
}
