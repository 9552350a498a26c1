package versionmoves

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/semver"
)

// zeroVersion is the version a scratch module requires of gcprobe's modules
// before it replaces them with this checkout, as the nested modules do.
const zeroVersion = "v0.0.0-00010101000000-000000000000"

// The host by default: Caddy, a program that links client_golang, the
// OpenTelemetry SDK and x/tools, as gcprobe does, at versions of its own.
const (
	defaultHost   = "github.com/caddyserver/caddy/v2@v2.11.9"
	defaultImport = "github.com/caddyserver/caddy/v2/cmd"
)

// TestVersionMoves requires a host module, records its build list, then
// adds gcprobe two ways (the root package imported; cmd/finalizercheck as
// a tool) and fails for every module whose version rises. The host is
// GCPROBE_VERSION_MOVES_HOST (module@version) with the package
// GCPROBE_VERSION_MOVES_IMPORT imported; scratch modules live under
// $GCPROBE_CACHE/version-moves and are removed at the end.
func TestVersionMoves(t *testing.T) {
	if os.Getenv("GCPROBE_VERSION_MOVES") != "1" {
		t.Skip("run by scripts/version-moves.sh (GCPROBE_VERSION_MOVES=1): it resolves a host program's modules through the module proxy")
	}
	gocmd, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("go command not on PATH: %v", err)
	}
	host := envOr("GCPROBE_VERSION_MOVES_HOST", defaultHost)
	hostPath, hostVersion, ok := strings.Cut(host, "@")
	if !ok {
		t.Fatalf("GCPROBE_VERSION_MOVES_HOST=%q: want module@version", host)
	}
	hostImport := envOr("GCPROBE_VERSION_MOVES_IMPORT", defaultImport)
	repo := os.Getenv("GCPROBE_REPO")
	if repo == "" {
		// This package is bench/internal/versionmoves of the repository.
		if repo, err = filepath.Abs(filepath.Join("..", "..", "..")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(filepath.Join(repo, "cmd", "finalizercheck", "go.mod")); err != nil {
		t.Fatalf("GCPROBE_REPO=%s is not a gcprobe checkout: %v", repo, err)
	}
	cache := os.Getenv("GCPROBE_CACHE")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = os.TempDir()
		}
		cache = filepath.Join(home, ".cache", "gcprobe")
	}
	base := filepath.Join(cache, "version-moves")
	if err := os.MkdirAll(base, 0o755); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp(base, "run-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })

	gorun := func(dir string, args ...string) []byte {
		t.Helper()
		cmd := exec.Command(gocmd, args...)
		cmd.Dir = dir
		// The scratch modules belong to no workspace; -mod=mod lets the
		// go command update go.mod and go.sum as it resolves.
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("in %s: go %s: %v\n%s", dir, strings.Join(args, " "), err, stderr.Bytes())
		}
		return out
	}

	// The host is the main module, as in its own repository: a copy of
	// its module tree, with its go.mod and go.sum as released.
	start := time.Now()
	dl := exec.Command(gocmd, "mod", "download", "-json", host)
	dl.Dir = base
	dl.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := dl.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && unreachable(string(out)+string(ee.Stderr)) {
			t.Skipf("the module proxy is unreachable: go mod download %s: %s%s", host, out, ee.Stderr)
		}
		t.Fatalf("go mod download %s: %v\n%s", host, err, out)
	}
	var info struct{ Dir, Error string }
	if err := json.Unmarshal(out, &info); err != nil || info.Dir == "" {
		t.Fatalf("go mod download %s: %v %s\n%s", host, err, info.Error, out)
	}
	if hostImport != hostPath && !strings.HasPrefix(hostImport, hostPath+"/") {
		t.Fatalf("GCPROBE_VERSION_MOVES_IMPORT=%s is not a package of %s", hostImport, hostPath)
	}
	rel := strings.TrimPrefix(strings.TrimPrefix(hostImport, hostPath), "/")

	// released is the build list of the host as it ships; before, the
	// same after `go mod tidy` by this go command (a host whose go.mod a
	// newer go command tidies differently is compared with itself tidied,
	// so that what moves is gcprobe's doing alone).
	// A host whose go.mod replaces its sibling modules by their
	// directories in its repository (etcd's) gets them at the versions it
	// requires instead, as a user of its release would.
	hostCopy := func(name string) string {
		d := copyModule(t, info.Dir, filepath.Join(dir, name))
		var mod struct {
			Replace []struct {
				Old struct{ Path string }
				New struct{ Path, Version string }
			}
		}
		if err := json.Unmarshal(gorun(d, "mod", "edit", "-json"), &mod); err != nil {
			t.Fatal(err)
		}
		for _, r := range mod.Replace {
			if r.New.Version == "" && (strings.HasPrefix(r.New.Path, "./") || strings.HasPrefix(r.New.Path, "../")) {
				gorun(d, "mod", "edit", "-dropreplace="+r.Old.Path)
				if name == "host" {
					t.Logf("the host's replace %s => %s dropped: the directory is not part of its module", r.Old.Path, r.New.Path)
				}
			}
		}
		return d
	}
	released := buildList(t, gorun(hostCopy("released"), "list", "-m", "-json", "all"))
	if v, ok := released[hostPath]; ok {
		t.Fatalf("%s@%s lists itself at %s: not the host's own module", hostPath, hostVersion, v)
	}
	hostDir := hostCopy("host")
	gorun(hostDir, "mod", "tidy")
	before := buildList(t, gorun(hostDir, "list", "-m", "-json", "all"))
	if r, a, d := compare(released, before); len(r)+len(a)+len(d) > 0 {
		t.Logf("the host's go.mod as released and tidied here differ (the baseline is the tidied one): raised %q, added %q, dropped %q", r, a, d)
	}
	pkgName := strings.TrimSpace(string(gorun(hostDir, "list", "-f", "{{.Name}}", "./"+rel)))
	t.Logf("host: %s, its own module (gcprobe imported in %s, package %s): %d modules in its build list (%.0f s)", host, hostImport, pkgName, len(before), time.Since(start).Seconds())

	cases := []struct {
		name string
		// edit is the go mod edit arguments; file, a Go file added to
		// the host's package hostImport, or "".
		edit []string
		file string
	}{
		{
			name: "root package imported",
			edit: []string{
				"-require=github.com/gcprobe/probe@" + zeroVersion,
				"-replace=github.com/gcprobe/probe=" + repo,
			},
			file: "package " + pkgName + "\n\nimport _ \"github.com/gcprobe/probe\"\n",
		},
		{
			name: "finalizercheck as a tool",
			edit: []string{
				"-require=github.com/gcprobe/probe/cmd/finalizercheck@" + zeroVersion,
				"-replace=github.com/gcprobe/probe/cmd/finalizercheck=" + filepath.Join(repo, "cmd", "finalizercheck"),
				"-tool=github.com/gcprobe/probe/cmd/finalizercheck",
			},
		},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			d := copyModule(t, hostDir, filepath.Join(dir, "case"+string(rune('a'+i))))
			if c.file != "" {
				writeFile(t, filepath.Join(d, rel), "gcprobe_versionmoves.go", c.file)
			}
			gorun(d, append([]string{"mod", "edit"}, c.edit...)...)
			gorun(d, "mod", "tidy")
			after := buildList(t, gorun(d, "list", "-m", "-json", "all"))
			raised, added, dropped := compare(before, after)
			graph := string(gorun(d, "mod", "graph"))
			hostOwn := 0
			for _, m := range raised {
				// Who requires the new version. If every one is a module
				// the host already selected at that very version, the
				// rise is the host's own requirement, which enters the
				// build list once gcprobe imports a package of that module
				// (graph pruning keeps a module's requirements out until
				// then): no requirement of gcprobe's can change it, and it
				// is reported. Anything else is gcprobe's doing and fails.
				path, now := raisedTo(m)
				from := requirers(graph, path+"@"+now)
				own := len(from) > 0
				for _, f := range from {
					fp, fv, _ := strings.Cut(f, "@")
					own = own && before[fp] == fv
				}
				if own {
					hostOwn++
					t.Logf("raised by the host's own requirement (%s, selected at that version before): %s", strings.Join(from, ", "), m)
					continue
				}
				t.Errorf("raised: %s (required at that version by %s)", m, strings.Join(from, ", "))
			}
			t.Logf("%d modules added (new to the host, none of its versions): %s", len(added), strings.Join(added, ", "))
			if len(dropped) > 0 {
				t.Logf("%d modules no longer in the build list: %s", len(dropped), strings.Join(dropped, ", "))
			}
			t.Logf("%d raised by gcprobe, %d by the host's own requirements, %d added, %d kept of %d (%.0f s)",
				len(raised)-hostOwn, hostOwn, len(added), len(before)-len(dropped)-len(raised), len(before), time.Since(start).Seconds())
		})
	}
}

// copyModule copies the module tree src (a module cache directory, read
// only, or an earlier copy) to dst, writable, and returns dst. Nested
// modules (directories with a go.mod of their own) and VCS folders are
// left out: they are not part of the module.
func copyModule(t *testing.T, src, dst string) string {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			if rel != "." {
				if d.Name() == ".git" || d.Name() == "vendor" {
					return filepath.SkipDir
				}
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir
				}
			}
			return os.MkdirAll(target, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
	if err != nil {
		t.Fatalf("copying the module %s: %v", src, err)
	}
	return dst
}

// compare returns the modules of after whose version is higher than in
// before ("path old => new"), those new in after ("path version"), and
// those of before that after no longer lists, each sorted.
func compare(before, after map[string]string) (raised, added, dropped []string) {
	for path, now := range after {
		was, ok := before[path]
		switch {
		case !ok:
			added = append(added, path+" "+now)
		case semver.Compare(now, was) > 0:
			raised = append(raised, path+" "+was+" => "+now)
		}
	}
	for path, was := range before {
		if _, ok := after[path]; !ok {
			dropped = append(dropped, path+" "+was)
		}
	}
	sort.Strings(raised)
	sort.Strings(added)
	sort.Strings(dropped)
	return raised, added, dropped
}

// raisedTo returns the path and new version of a line of compare's raised.
func raisedTo(line string) (path, version string) {
	path, _, _ = strings.Cut(line, " ")
	_, version, _ = strings.Cut(line, " => ")
	return path, version
}

// requirers returns the modules (path@version) other than the main module
// that `go mod graph` shows requiring target (path@version).
func requirers(graph, target string) []string {
	var from []string
	for _, line := range strings.Split(graph, "\n") {
		// The main module's own line (no @version) is the result of the
		// tidy, not a cause: left out.
		if f := strings.Fields(line); len(f) == 2 && f[1] == target && strings.Contains(f[0], "@") {
			from = append(from, f[0])
		}
	}
	return from
}

// buildList decodes `go list -m -json all` into path => selected version,
// leaving out the main module.
func buildList(t *testing.T, out []byte) map[string]string {
	t.Helper()
	list := map[string]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var m struct {
			Path, Version string
			Main          bool
		}
		if err := dec.Decode(&m); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("go list -m -json all: %v", err)
		}
		if !m.Main {
			list[m.Path] = m.Version
		}
	}
	return list
}

// unreachable reports whether the go command's output says that it could
// not reach the module proxy at all, as opposed to any other failure.
func unreachable(out string) bool {
	for _, s := range []string{"dial tcp", "no such host", "i/o timeout", "connection refused", "network is unreachable", "TLS handshake timeout"} {
		if strings.Contains(out, s) {
			return true
		}
	}
	return false
}

func writeFile(t *testing.T, dir, name, text string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func TestCompare(t *testing.T) {
	before := map[string]string{"a": "v1.2.0", "b": "v0.0.0-20240101000000-abcdefabcdef", "c": "v1.0.0", "d": "v2.0.0+incompatible"}
	after := map[string]string{"a": "v1.10.0", "b": "v0.0.0-20230101000000-abcdefabcdef", "d": "v2.0.0+incompatible", "e": "v0.1.0"}
	raised, added, dropped := compare(before, after)
	if want := []string{"a v1.2.0 => v1.10.0"}; !equal(raised, want) {
		t.Errorf("raised %q, want %q", raised, want)
	}
	if want := []string{"e v0.1.0"}; !equal(added, want) {
		t.Errorf("added %q, want %q", added, want)
	}
	if want := []string{"c v1.0.0"}; !equal(dropped, want) {
		t.Errorf("dropped %q, want %q", dropped, want)
	}
}

func equal(a, b []string) bool {
	return strings.Join(a, "\n") == strings.Join(b, "\n")
}
