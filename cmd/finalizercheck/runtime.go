package main

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// The -runtime mode: prepare a build in which the Go runtime itself
// reports every SetFinalizer, AddCleanup, Cleanup.Stop and every
// finalizer and cleanup run to finalizerwatch's ledger, the standard
// library's and every dependency's included, through go build -overlay.
//
// Why an overlay and not -toolexec: an overlay is a file the go command
// reads, not a program it runs for every compile; it composes with -race,
// -trimpath, -cover, cgo and GOFLAGS as any build does, and the go command
// caches the patched runtime like any other package (the standard library
// is rebuilt once). Its one constraint, that a build takes one -overlay,
// is met by merging the user's own overlay into it.

//go:embed rtpatch/gcprobe_hooks.go.tmpl rtpatch/rtlink.go.tmpl
var rtTemplates embed.FS

// rtlinkStubMarker is the line finalizerwatch/rtlink.go carries while it
// is the stub that the mode replaces.
const rtlinkStubMarker = "gcprobe:rtlink stub"

// isRuntimeFlag reports whether arg asks for the -runtime mode.
func isRuntimeFlag(arg string) bool {
	for _, p := range []string{"-runtime", "--runtime"} {
		if arg == p || strings.HasPrefix(arg, p+"=") {
			return true
		}
	}
	return false
}

const runtimeUsage = `usage: finalizercheck -runtime DIR [-overlay file]

Prepare, in DIR, the runtime build mode: a patched copy of the Go
runtime's finalizer and cleanup code, verified against the installed
toolchain's source, whose hooks report every registration in the binary
(the standard library's and every dependency's included) to gcprobe's
ledger. Run it in the module that builds the program (it finds the
finalizerwatch package the module uses). The last line printed is the
flag to add to go build, go test and go run. -overlay merges your own
overlay file into the mode's (GOFLAGS' -overlay is merged too).
`

// runtimeConfig is what the command line of the -runtime mode says.
type runtimeConfig struct {
	dir      string // where to write the mode's files, absolute
	overlay  string // the user's own overlay file, merged
	goroot   string // the toolchain whose runtime is patched (default: go env GOROOT)
	watchDir string // finalizerwatch's directory (default: from go list)
}

func parseRuntimeArgs(args []string, stderr io.Writer) (*runtimeConfig, error) {
	fs := flag.NewFlagSet("finalizercheck -runtime", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, runtimeUsage) }
	dir := fs.String("runtime", "", "prepare the mode in `DIR`")
	overlay := fs.String("overlay", "", "merge this overlay `file` into the mode's")
	goroot := fs.String("goroot", "", "patch this toolchain's runtime instead of go env GOROOT's (for tests)")
	watchDir := fs.String("watchdir", "", "finalizerwatch's directory instead of go list's answer (for tests)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q: -runtime takes no packages", fs.Args())
	}
	if *dir == "" {
		return nil, errors.New("-runtime needs a directory: finalizercheck -runtime DIR")
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		return nil, err
	}
	return &runtimeConfig{dir: abs, overlay: *overlay, goroot: *goroot, watchDir: *watchDir}, nil
}

// runtimeMain runs the -runtime mode with args (the command line without
// the program name) and returns the exit status.
func runtimeMain(args []string, stdout, stderr io.Writer) int {
	c, err := parseRuntimeArgs(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err == nil {
		err = c.run(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "finalizercheck -runtime: %v\n", err)
		return 1
	}
	return 0
}

// rtEnv is the part of go env the mode depends on.
type rtEnv struct {
	GOROOT, GOVERSION, GOARCH, GOFLAGS string
}

// pointer32 lists the architectures whose pointers are 32 bits wide: a
// finalizer's token travels in the high bits of a word, which they lack.
var pointer32 = []string{"386", "arm", "mips", "mipsle"}

func (c *runtimeConfig) run(stdout io.Writer) error {
	out, err := goCmd("env", "-json", "GOROOT", "GOVERSION", "GOARCH", "GOFLAGS")
	if err != nil {
		return err
	}
	var env rtEnv
	if err := json.Unmarshal(out, &env); err != nil {
		return fmt.Errorf("go env: %w", err)
	}
	if slices.Contains(pointer32, env.GOARCH) {
		return fmt.Errorf("GOARCH=%s has 32-bit pointers; the runtime build mode needs 64-bit ones (amd64, arm64, ...)", env.GOARCH)
	}
	goroot := c.goroot
	if goroot == "" {
		goroot = env.GOROOT
	}
	version := env.GOVERSION
	if c.goroot != "" {
		version = "the toolchain at " + goroot
	}
	patched, err := patchRuntime(filepath.Join(goroot, "src", "runtime"), version)
	if err != nil {
		return err
	}

	watchDir := c.watchDir
	if watchDir == "" {
		out, err := goCmd("list", "-f", "{{.Dir}}", watchPackage)
		if err != nil {
			return fmt.Errorf("finding %s from this module (run -runtime in the module that builds the program; it must require %s): %w", watchPackage, gcprobeModule, err)
		}
		watchDir = strings.TrimSpace(string(out))
	}
	stub := filepath.Join(watchDir, "rtlink.go")
	if b, err := os.ReadFile(stub); err != nil || !bytes.Contains(b, []byte(rtlinkStubMarker)) {
		return fmt.Errorf("%s is not the stub this finalizercheck replaces (%q): use the finalizercheck of the same gcprobe version as the module", stub, rtlinkStubMarker)
	}

	// Write the files, then the overlay that names them.
	replace := map[string]string{}
	rtDir := filepath.Join(c.dir, "runtime")
	if err := os.MkdirAll(rtDir, 0o755); err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(patched)) {
		dst := filepath.Join(rtDir, name)
		if err := os.WriteFile(dst, patched[name], 0o644); err != nil {
			return err
		}
		replace[filepath.Join(goroot, "src", "runtime", name)] = dst
	}
	hooks, _ := rtTemplates.ReadFile("rtpatch/gcprobe_hooks.go.tmpl")
	dst := filepath.Join(rtDir, "gcprobe_hooks.go")
	if err := os.WriteFile(dst, hooks, 0o644); err != nil {
		return err
	}
	replace[filepath.Join(goroot, "src", "runtime", "gcprobe_hooks.go")] = dst
	link, _ := rtTemplates.ReadFile("rtpatch/rtlink.go.tmpl")
	if err := os.MkdirAll(filepath.Join(c.dir, "finalizerwatch"), 0o755); err != nil {
		return err
	}
	dst = filepath.Join(c.dir, "finalizerwatch", "rtlink.go")
	if err := os.WriteFile(dst, link, 0o644); err != nil {
		return err
	}
	replace[stub] = dst

	merged, err := mergeOverlays(replace, c.overlay, overlayInGoflags(env.GOFLAGS))
	if err != nil {
		return err
	}
	overlayFile := filepath.Join(c.dir, "overlay.json")
	b, err := json.MarshalIndent(struct{ Replace map[string]string }{merged}, "", "\t")
	if err != nil {
		return err
	}
	if err := os.WriteFile(overlayFile, append(b, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "# runtime build mode for %s (%s): patched %s, added runtime/gcprobe_hooks.go, linked %s\n",
		env.GOVERSION, env.GOARCH, strings.Join(slices.Sorted(maps.Keys(patched)), ", "), stub)
	fmt.Fprintln(stdout, "# add this flag to go build, go test and go run (the standard library is rebuilt once, then cached):")
	fmt.Fprintf(stdout, "-overlay=%s\n", overlayFile)
	return nil
}

// patchRuntime applies the join points to the runtime sources in dir and
// returns the patched files by base name. version names the toolchain in
// the refusal.
func patchRuntime(dir, version string) (map[string][]byte, error) {
	if _, err := os.Stat(filepath.Join(dir, "gcprobe_hooks.go")); err == nil {
		return nil, fmt.Errorf("%s's runtime already has gcprobe_hooks.go: refusing to patch a runtime patched before", version)
	}
	files := map[string][]byte{}
	for _, jp := range joinPoints {
		src, ok := files[jp.file]
		if !ok {
			b, err := os.ReadFile(filepath.Join(dir, jp.file))
			if err != nil {
				return nil, fmt.Errorf("%s: reading runtime/%s: %w; refusing to build a runtime this patch was not verified against", version, jp.file, err)
			}
			src = b
		}
		if n := bytes.Count(src, []byte(jp.find)); n != 1 {
			return nil, fmt.Errorf("%s's runtime/%s does not have %s as this patch expects (found %d times, want once); refusing to build a runtime it did not verify (the patch is verified against go1.26)", version, jp.file, jp.what, n)
		}
		files[jp.file] = bytes.Replace(src, []byte(jp.find), []byte(jp.advice), 1)
	}
	return files, nil
}

// overlayInGoflags returns the -overlay file that GOFLAGS names, if any.
func overlayInGoflags(goflags string) string {
	for _, f := range strings.Fields(goflags) {
		for _, p := range []string{"-overlay=", "--overlay="} {
			if v, ok := strings.CutPrefix(f, p); ok {
				return v
			}
		}
	}
	return ""
}

// mergeOverlays adds the entries of the user's overlay files to the mode's
// own. A file both replace is refused: which of the two would be built
// is not the mode's to decide.
func mergeOverlays(own map[string]string, files ...string) (map[string]string, error) {
	out := maps.Clone(own)
	for _, f := range files {
		if f == "" {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("reading your overlay: %w", err)
		}
		var user struct{ Replace map[string]string }
		if err := json.Unmarshal(b, &user); err != nil {
			return nil, fmt.Errorf("your overlay %s: %w", f, err)
		}
		for k, v := range user.Replace {
			if old, ok := out[k]; ok && old != v {
				return nil, fmt.Errorf("your overlay %s replaces %s, which the runtime build mode replaces too: refusing to choose one", f, k)
			}
			out[k] = v
		}
	}
	return out, nil
}
