package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// The -deps mode: prepare a build in which the registrations of every
// non-standard package, dependencies included, go through finalizerwatch.
// deps.go holds the command and what go list tells it; deps_rewrite.go
// turns the analyzer's suggested fixes into rewritten files that keep
// their lines; deps_tree.go writes the copies, the go.mod and the overlay.

const (
	gcprobeModule = "github.com/gcprobe/probe"
	watchPackage  = gcprobeModule + "/finalizerwatch"
)

// isDepsFlag reports whether arg asks for the -deps mode.
func isDepsFlag(arg string) bool {
	for _, p := range []string{"-deps", "--deps"} {
		if arg == p || strings.HasPrefix(arg, p+"=") {
			return true
		}
	}
	return false
}

// depsConfig is what the command line of the -deps mode says.
type depsConfig struct {
	dir      string   // where to prepare the build, absolute
	tags     string   // -tags, passed to go list and printed with the flags
	patterns []string // the packages of the build
}

const depsUsage = `usage: finalizercheck -deps DIR [-tags list] [packages]

Prepare, in DIR, a build in which every runtime.SetFinalizer and
runtime.AddCleanup call of the build's non-standard packages, dependencies
included, goes through finalizerwatch. The last line printed is the flags
to pass to go build, go test or go run.
`

func parseDepsArgs(args []string, stderr io.Writer) (*depsConfig, error) {
	fs := flag.NewFlagSet("finalizercheck -deps", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, depsUsage) }
	dir := fs.String("deps", "", "prepare the build in `DIR`")
	tags := fs.String("tags", "", "build `tags`, as for go build")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	for _, p := range fs.Args() {
		if strings.HasPrefix(p, "-") {
			return nil, fmt.Errorf("flag %s after the packages: put flags before the packages", p)
		}
	}
	if *dir == "" {
		return nil, errors.New("-deps needs a directory: finalizercheck -deps DIR [packages]")
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		return nil, err
	}
	c := &depsConfig{dir: abs, tags: *tags, patterns: fs.Args()}
	if len(c.patterns) == 0 {
		c.patterns = []string{"."}
	}
	return c, nil
}

// depsMain runs the -deps mode with args (the command line without the
// program name) and returns the exit status.
func depsMain(args []string, stdout, stderr io.Writer) int {
	c, err := parseDepsArgs(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err == nil {
		err = c.run(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "finalizercheck -deps: %v\n", err)
		return 1
	}
	return 0
}

// goEnv is the part of go env that the prepared build depends on.
type goEnv struct {
	GOMODCACHE, GOWORK, GOFLAGS, GOMOD, GOOS, GOARCH, CGO_ENABLED, GOVERSION string
}

// listModule and listPackage are the fields of go list -json used here.
type listModule struct {
	Path, Version, Dir, GoMod string
	Main                      bool
	Replace                   *listModule
}

type listPackage struct {
	ImportPath, Dir, ForTest  string
	Standard                  bool
	GoFiles, CgoFiles         []string
	TestGoFiles, XTestGoFiles []string
	IgnoredGoFiles            []string
	Module                    *listModule
	Error                     *struct{ Err string }
}

func (c *depsConfig) buildFlags(vendor bool) []string {
	var f []string
	if c.tags != "" {
		f = append(f, "-tags="+c.tags)
	}
	if vendor {
		f = append(f, "-mod=mod")
	}
	return f
}

// goCmd runs the go command with args and returns its standard output; a
// failure carries its standard error.
func goCmd(args ...string) ([]byte, error) {
	cmd := exec.Command("go", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		return nil, fmt.Errorf("go %s: %s", strings.Join(args, " "), msg)
	}
	return out, nil
}

func readGoEnv() (*goEnv, error) {
	out, err := goCmd("env", "-json", "GOMODCACHE", "GOWORK", "GOFLAGS", "GOMOD", "GOOS", "GOARCH", "CGO_ENABLED", "GOVERSION")
	if err != nil {
		return nil, err
	}
	var e goEnv
	if err := json.Unmarshal(out, &e); err != nil {
		return nil, fmt.Errorf("go env: %v", err)
	}
	switch {
	case e.GOMOD == "" || e.GOMOD == os.DevNull:
		return nil, errors.New("not in a module: run it in the module whose build to prepare")
	case e.GOWORK != "" && e.GOWORK != "off":
		return nil, fmt.Errorf("a workspace is in use (GOWORK=%s), and the go command refuses -modfile in workspace mode: run this and the build with GOWORK=off", e.GOWORK)
	}
	for _, f := range strings.Fields(e.GOFLAGS) {
		if strings.HasPrefix(f, "-modfile") || strings.HasPrefix(f, "-overlay") {
			return nil, fmt.Errorf("GOFLAGS sets %s: unset it, the prepared build brings its own", f)
		}
	}
	return &e, nil
}

// checkDir refuses a DIR where writing the prepared build would change
// the user's module or another one: the main module's own directory (its
// go.mod and go.sum would be overwritten, and the copies land inside it),
// a directory that holds Go files of the main module (the go.mod written
// there would cut them out of it), or one whose go.mod is another
// module's. A directory of its own, inside the module or not, is fine.
func (c *depsConfig) checkDir(env *goEnv) error {
	root := filepath.Dir(env.GOMOD)
	own := " -deps writes a go.mod, a go.sum and copies of modules into DIR, and promises to leave your module alone: prepare the build in a directory of its own, such as " + filepath.Join(os.TempDir(), "gcprobe-deps")
	if sameDir(c.dir, root) {
		return fmt.Errorf("%s is the main module's directory (%s):%s", c.dir, env.GOMOD, own)
	}
	if rel, err := filepath.Rel(root, c.dir); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		if f := moduleGoFile(c.dir); f != "" {
			return fmt.Errorf("%s holds Go files of the main module (%s), which the go.mod written there would cut out of it:%s", c.dir, f, own)
		}
	}
	b, err := os.ReadFile(filepath.Join(c.dir, "go.mod"))
	if err != nil {
		return nil // none yet, or none readable: writing it will say
	}
	orig, err := os.ReadFile(env.GOMOD)
	if err != nil {
		return err
	}
	if got, main := modulePath(b), modulePath(orig); got != main {
		return fmt.Errorf("%s is the go.mod of module %s, not a build prepared for %s:%s", filepath.Join(c.dir, "go.mod"), got, main, own)
	}
	return nil
}

// moduleGoFile returns a Go file beneath dir, a directory inside the main
// module, that belongs to the main module's packages, or "" if there is
// none: what -deps wrote there itself (dir/overlay, dir/mod), directories
// the go command ignores (".x", "_x", testdata) and nested modules do not
// count.
func moduleGoFile(dir string) string {
	var found string
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // unreadable: nothing the go command reads either
		}
		if d.IsDir() {
			if path == dir {
				return nil
			}
			name := d.Name()
			if parent := filepath.Dir(path); parent == dir && (name == "overlay" || name == "mod") ||
				strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(d.Name(), ".go") {
			found, _ = filepath.Rel(dir, path)
			return filepath.SkipAll
		}
		return nil
	})
	return found
}

// sameDir reports whether a and b name the same directory.
func sameDir(a, b string) bool {
	if filepath.Clean(a) == filepath.Clean(b) {
		return true
	}
	fa, errA := os.Stat(a)
	fb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(fa, fb)
}

// modulePath returns the path of the module statement of go.mod text, ""
// if it has none.
func modulePath(gomod []byte) string {
	for l := range strings.Lines(string(gomod)) {
		l, _, _ = strings.Cut(l, "//")
		f := strings.Fields(l)
		if len(f) == 2 && f[0] == "module" {
			return strings.Trim(f[1], "\"`")
		}
	}
	return ""
}

// vendored reports whether the main module builds from its vendor
// directory by default.
func vendored(env *goEnv) bool {
	if _, err := os.Stat(filepath.Join(filepath.Dir(env.GOMOD), "vendor", "modules.txt")); err != nil {
		return false
	}
	for _, f := range strings.Fields(env.GOFLAGS) {
		if f == "-mod=mod" || f == "-mod=readonly" {
			return false
		}
	}
	return true
}

// goList lists the packages of patterns and their dependencies, tests
// included, as the build with flags sees them.
func goList(flags []string, patterns ...string) ([]*listPackage, error) {
	args := append([]string{"list", "-e", "-deps", "-test", "-json=ImportPath,Dir,ForTest,Standard,GoFiles,CgoFiles,TestGoFiles,XTestGoFiles,IgnoredGoFiles,Module,Error"}, flags...)
	args = append(args, "--")
	args = append(args, patterns...)
	out, err := goCmd(args...)
	if err != nil {
		return nil, err
	}
	var pkgs []*listPackage
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		p := new(listPackage)
		if err := dec.Decode(p); err == io.EOF {
			break
		} else if err != nil {
			return nil, fmt.Errorf("go list: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs, nil
}

// basePath drops the test variant suffix of an import path: "p [p.test]"
// is p.
func basePath(importPath string) string {
	p, _, _ := strings.Cut(importPath, " ")
	return p
}

func ownModule(path string) bool {
	return path == gcprobeModule || strings.HasPrefix(path, gcprobeModule+"/")
}

// mentions reports whether any of the files in dir names SetFinalizer or
// AddCleanup: packages that do not cannot reference the runtime
// functions, and need no type checking.
func mentions(dir string, files []string) (bool, error) {
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			return false, err
		}
		if bytes.Contains(b, []byte("SetFinalizer")) || bytes.Contains(b, []byte("AddCleanup")) {
			return true, nil
		}
	}
	return false, nil
}

// depsReport collects what the command says before the flags.
type depsReport struct {
	skipped   []string // packages left alone, and why
	unfixed   []string // registrations left as they are, and why
	rewritten []string // file:line of each rewritten registration
	notes     []string
}

func (c *depsConfig) run(stdout io.Writer) error {
	env, err := readGoEnv()
	if err != nil {
		return err
	}
	if err := c.checkDir(env); err != nil {
		return err
	}
	vendor := vendored(env)
	flags := c.buildFlags(vendor)
	rep := new(depsReport)
	if vendor {
		rep.notes = append(rep.notes, "the main module vendors its dependencies, but rewritten modules cannot go into vendor/ without changing it: the prepared build reads modules from the module cache (-mod=mod; run go mod download if one is missing)")
	}
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return err
	}

	// The packages finalizerwatch itself depends on cannot import it.
	cannot := make(map[string]bool)
	wdeps, err := goList(flags, watchPackage)
	if err != nil {
		return fmt.Errorf("the build cannot load %s (does the main module require %s? go get %s): %v", watchPackage, gcprobeModule, gcprobeModule, err)
	}
	for _, p := range wdeps {
		if p.Error != nil {
			return fmt.Errorf("the build cannot load %s (does the main module require %s? go get %s): %s", watchPackage, gcprobeModule, gcprobeModule, p.Error.Err)
		}
		cannot[p.ImportPath] = true
	}

	pkgs, err := goList(flags, c.patterns...)
	if err != nil {
		return err
	}
	var deps, mains []string // candidates to type check and analyze
	seen := make(map[string]bool)
	byPath := make(map[string]*listPackage)
	for _, p := range pkgs {
		if p.Error != nil && p.ForTest == "" {
			return fmt.Errorf("package %s: %s", p.ImportPath, p.Error.Err)
		}
		path := basePath(p.ImportPath)
		if p.Standard || p.Module == nil || seen[path] || strings.HasSuffix(path, ".test") ||
			p.ForTest != "" && strings.HasSuffix(path, "_test") {
			continue // an external test package is analyzed with the package it tests
		}
		seen[path] = true
		files := slices.Concat(p.GoFiles, p.CgoFiles)
		if p.Module.Main {
			files = slices.Concat(files, p.TestGoFiles, p.XTestGoFiles)
		}
		ok, err := mentions(p.Dir, files)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		switch {
		case ownModule(p.Module.Path):
			rep.skipped = append(rep.skipped, path+": part of gcprobe, whose registrations are its own")
		case cannot[path]:
			rep.skipped = append(rep.skipped, path+": "+watchPackage+" depends on it, so it cannot import finalizerwatch (its registrations stay unwatched)")
		case p.Module.Main:
			mains = append(mains, path)
			byPath[path] = p
		default:
			deps = append(deps, path)
			byPath[path] = p
		}
	}

	files, err := c.analyze(flags, deps, mains, byPath, rep)
	if err != nil {
		return err
	}
	tree := &depsTree{cfg: c, env: env, rep: rep}
	if err := tree.write(files); err != nil {
		return err
	}

	for _, s := range rep.notes {
		fmt.Fprintln(stdout, "note:", s)
	}
	for _, s := range rep.skipped {
		fmt.Fprintln(stdout, "skipped", s)
	}
	for _, s := range rep.unfixed {
		fmt.Fprintln(stdout, "unwatched", s)
	}
	for _, s := range rep.rewritten {
		fmt.Fprintln(stdout, "watched", s)
	}
	for _, s := range tree.actions {
		fmt.Fprintln(stdout, s)
	}
	fmt.Fprintf(stdout, "prepared for GOOS=%s GOARCH=%s CGO_ENABLED=%s%s: build with the same environment and these flags:\n", env.GOOS, env.GOARCH, env.CGO_ENABLED, tagNote(c.tags))
	buildFlags := append([]string{"-modfile=" + filepath.Join(c.dir, "go.mod")}, flags...)
	if tree.overlay {
		buildFlags = append(buildFlags, "-overlay="+filepath.Join(c.dir, "overlay.json"))
	}
	fmt.Fprintln(stdout, strings.Join(buildFlags, " "))
	return nil
}

func tagNote(tags string) string {
	if tags == "" {
		return ""
	}
	return " -tags=" + tags
}
