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
// library's and every dependency's included, and every runtime.GC (and
// debug.FreeOSMemory) call to its count of forced GC cycles by line,
// through go build -overlay.
//
// Why an overlay and not -toolexec: an overlay is a file the go command
// reads, not a program it runs for every compile; it composes with -race,
// -trimpath, -cover, cgo and GOFLAGS as any build does, and the go command
// caches the patched runtime like any other package (the standard library
// is rebuilt once). Its constraints: a build takes one -overlay, met by
// merging the user's own overlay into it; and the go command refuses to
// overlay files beneath GOMODCACHE, so gcprobe's side is selected by a
// build tag (gcprobe_runtime, finalizerwatch/rtlink_on.go) rather than by
// replacing a file of the gcprobe module, which users have in the module
// cache, and a toolchain that GOTOOLCHAIN downloaded into the module cache
// is refused with advice.

//go:embed rtpatch/gcprobe_hooks.go.tmpl
var rtTemplates embed.FS

// runtimeTag selects finalizerwatch/rtlink_on.go, which links the ledger
// to the hooks.
const runtimeTag = "gcprobe_runtime"

// isRuntimeFlag reports whether arg asks for the -runtime mode.
func isRuntimeFlag(arg string) bool {
	for _, p := range []string{"-runtime", "--runtime"} {
		if arg == p || strings.HasPrefix(arg, p+"=") {
			return true
		}
	}
	return false
}

const runtimeUsage = `usage: finalizercheck -runtime DIR [-start [-gcprobe DIR]] [-tags list] [-overlay file]

Prepare, in DIR, the runtime build mode: a patched copy of the Go
runtime's finalizer and cleanup code, verified against the installed
toolchain's source, whose hooks report every registration in the binary
(the standard library's and every dependency's included) to gcprobe's
ledger. The last line printed is the flags to add to go build, go test
and go run: an -overlay and -tags=gcprobe_runtime. If you build with
-tags or -overlay of your own, pass them here (GOFLAGS' are read): the
printed flags include them, since a build takes one of each.

With -start, run in a program's main module, the build also links gcprobe
into every main package of the module and starts it from an init when
GCPROBE_LISTEN is set (package github.com/gcprobe/probe/autostart documents
the GCPROBE_* variables), without a change to any file of the program: the
printed flags add a -modfile, a copy of go.mod and go.sum in DIR that
requires gcprobe. The gcprobe linked is the version this command was built
at, the one your module requires if it does, or the checkout -gcprobe DIR
names.

The first build in the mode recompiles every package the program uses,
since they all depend on the patched runtime (minutes for a large server:
about 450 to 850 packages, 2.5 to 5.5 minutes on 2 cores); later builds are
cached like any other.
`

// runtimeConfig is what the command line of the -runtime mode says.
type runtimeConfig struct {
	dir     string // where to write the mode's files, absolute
	overlay string // the user's own overlay file, merged
	tags    string // the user's own build tags, merged
	goroot  string // the toolchain whose runtime is patched (default: go env GOROOT)
	start   bool   // -start: link and start the probe in the main packages
	gcprobe string // -gcprobe: the gcprobe checkout to link, absolute
}

func parseRuntimeArgs(args []string, stderr io.Writer) (*runtimeConfig, error) {
	fs := flag.NewFlagSet("finalizercheck -runtime", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, runtimeUsage) }
	dir := fs.String("runtime", "", "prepare the mode in `DIR`")
	overlay := fs.String("overlay", "", "merge this overlay `file` into the mode's")
	tags := fs.String("tags", "", "your own build `tags`, included in the printed -tags")
	goroot := fs.String("goroot", "", "patch this toolchain's runtime instead of go env GOROOT's (for tests)")
	start := fs.Bool("start", false, "link the probe into the main module's main packages and start it when GCPROBE_LISTEN is set")
	gcprobe := fs.String("gcprobe", "", "with -start, link the gcprobe checkout in `DIR` (default: this command's version)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	// Before anything else: "-runtime -h" gives -h to -runtime as DIR.
	if err := checkModeDir("-runtime", *dir); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.Usage()
		}
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
	c := &runtimeConfig{dir: abs, overlay: *overlay, tags: *tags, goroot: *goroot, start: *start}
	if *gcprobe != "" {
		if !*start {
			return nil, errors.New("-gcprobe DIR names the gcprobe that -start links: give -start too")
		}
		if c.gcprobe, err = filepath.Abs(*gcprobe); err != nil {
			return nil, err
		}
		b, err := os.ReadFile(filepath.Join(c.gcprobe, "go.mod"))
		if err != nil || modulePath(b) != gcprobeModule {
			return nil, fmt.Errorf("-gcprobe %s: not a checkout of %s (its go.mod is not that module's)", *gcprobe, gcprobeModule)
		}
	}
	return c, nil
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
	GOROOT, GOVERSION, GOARCH, GOFLAGS, GOMODCACHE string
}

// pointer32 lists the architectures whose pointers are 32 bits wide: a
// finalizer's token travels in the high bits of a word, which they lack.
var pointer32 = []string{"386", "arm", "mips", "mipsle"}

func (c *runtimeConfig) run(stdout io.Writer) error {
	out, err := goCmd("env", "-json", "GOROOT", "GOVERSION", "GOARCH", "GOFLAGS", "GOMODCACHE")
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
	if env.GOMODCACHE != "" && within(goroot, env.GOMODCACHE) {
		return fmt.Errorf("%s lives in the module cache (%s), where the go command lets no overlay replace a file: "+
			"a toolchain that GOTOOLCHAIN downloaded cannot be patched. Install %s outside the module cache "+
			"(its release archive, or golang.org/dl) and run -runtime with that go on PATH", version, goroot, env.GOVERSION)
	}
	var startGo *goEnv
	if c.start {
		if startGo, err = c.startEnv(); err != nil {
			return err
		}
	}
	patched, err := patchRuntime(filepath.Join(goroot, "src", "runtime"), version)
	if err != nil {
		return err
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

	merged, err := mergeOverlays(replace, c.overlay, flagInGoflags(env.GOFLAGS, "overlay"))
	if err != nil {
		return err
	}
	tags := mergeTags(runtimeTag, flagInGoflags(env.GOFLAGS, "tags"), c.tags)
	var plan *startPlan
	if c.start {
		if plan, err = c.prepareStart(startGo, merged, tags); err != nil {
			return err
		}
		for k, v := range plan.overlay {
			if old, ok := merged[k]; ok && old != v {
				return fmt.Errorf("your overlay replaces %s, which -start adds: refusing to choose one", k)
			}
			merged[k] = v
		}
	}
	overlayFile := filepath.Join(c.dir, "overlay.json")
	if err := writeOverlay(overlayFile, merged); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "# runtime build mode for %s (%s): patched runtime/%s, added runtime/gcprobe_hooks.go\n",
		env.GOVERSION, env.GOARCH, strings.Join(slices.Sorted(maps.Keys(patched)), ", runtime/"))
	which := env.GOVERSION + " at " + goroot
	if c.goroot != "" {
		which = version
	}
	fmt.Fprintf(stdout, "# build with this go, %s: under another toolchain (GOTOOLCHAIN, a go.mod toolchain line) the build fails to link runtime.gcprobePatchedRuntime\n", which)
	flags := fmt.Sprintf("-overlay=%s -tags=%s", overlayFile, tags)
	if plan != nil {
		fmt.Fprintf(stdout, "# -start: %s start gcprobe %s when GCPROBE_LISTEN is set; go.mod and go.sum stay as they are (the build reads %s)\n",
			strings.Join(plan.mains, ", "), plan.version, plan.modfile)
		flags = "-modfile=" + plan.modfile + " " + flags
		if plan.vendor {
			fmt.Fprintln(stdout, "# the module vendors its dependencies and gcprobe is not in vendor/: the build reads the module cache (-mod=mod)")
			flags += " -mod=mod"
		}
	}
	fmt.Fprintln(stdout, "# add these flags to go build, go test and go run (the first build recompiles every package the program uses, since all depend on the runtime; later builds are cached):")
	fmt.Fprintln(stdout, flags)
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
	changed := map[string]bool{}
	for _, jp := range joinPoints {
		src, ok := files[jp.file]
		if !ok {
			b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(jp.file)))
			if err != nil {
				return nil, fmt.Errorf("%s: reading runtime/%s: %w; refusing to build a runtime this patch was not verified against", version, jp.file, err)
			}
			src = b
		}
		if n := bytes.Count(src, []byte(jp.find)); n != 1 {
			return nil, fmt.Errorf("%s's runtime/%s does not have %s as this patch expects (found %d times, want once); refusing to build a runtime it did not verify (the patch is verified against go1.26 and go1.27)", version, jp.file, jp.what, n)
		}
		files[jp.file] = bytes.Replace(src, []byte(jp.find), []byte(jp.advice), 1)
		changed[jp.file] = changed[jp.file] || jp.advice != jp.find
	}
	// A file only checked is not overlaid: the build reads the toolchain's.
	maps.DeleteFunc(files, func(name string, _ []byte) bool { return !changed[name] })
	return files, nil
}

// flagInGoflags returns the value GOFLAGS gives the flag name, if any
// (GOFLAGS holds -flag=value words only).
func flagInGoflags(goflags, name string) string {
	v := ""
	for _, f := range strings.Fields(goflags) {
		for _, p := range []string{"-" + name + "=", "--" + name + "="} {
			if rest, ok := strings.CutPrefix(f, p); ok {
				v = rest // the last one wins, as in the go command
			}
		}
	}
	return v
}

// mergeTags joins build tag lists (comma- or space-separated), each tag
// once, in order.
func mergeTags(lists ...string) string {
	var out []string
	for _, l := range lists {
		for _, t := range strings.FieldsFunc(l, func(r rune) bool { return r == ',' || r == ' ' }) {
			if !slices.Contains(out, t) {
				out = append(out, t)
			}
		}
	}
	return strings.Join(out, ",")
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
