package versionmoves

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/modfile"
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

	// The host's go directive, from its go.mod: the scratch module must not
	// raise it (nor lower it below what the host needs).
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
	var info struct{ GoMod, Error string }
	if err := json.Unmarshal(out, &info); err != nil || info.GoMod == "" {
		t.Fatalf("go mod download %s: %v %s\n%s", host, err, info.Error, out)
	}
	hostMod := readModFile(t, info.GoMod)
	goLine := "1.21"
	if hostMod.Go != nil {
		goLine = hostMod.Go.Version
	}

	hostDir := filepath.Join(dir, "host")
	writeFile(t, hostDir, "go.mod", "module example.invalid/host\n\ngo "+goLine+"\n")
	writeFile(t, hostDir, "main.go", "package main\n\nimport _ \""+hostImport+"\"\n\nfunc main() {}\n")
	gorun(hostDir, "get", host)
	gorun(hostDir, "mod", "tidy")
	before := buildList(t, gorun(hostDir, "list", "-m", "-json", "all"))
	if got := before[hostPath]; got != hostVersion {
		t.Fatalf("the scratch host selects %s %s, want %s", hostPath, got, hostVersion)
	}
	t.Logf("host: %s (importing %s): %d modules in its build list (%.0f s)", host, hostImport, len(before), time.Since(start).Seconds())

	cases := []struct {
		name string
		// edit is the go mod edit arguments; file, a Go file added to
		// package main, or "".
		edit []string
		file string
	}{
		{
			name: "root package imported",
			edit: []string{
				"-require=github.com/gcprobe/probe@" + zeroVersion,
				"-replace=github.com/gcprobe/probe=" + repo,
			},
			file: "package main\n\nimport _ \"github.com/gcprobe/probe\"\n",
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
			d := filepath.Join(dir, "case"+string(rune('a'+i)))
			for _, name := range []string{"go.mod", "go.sum", "main.go"} {
				b, err := os.ReadFile(filepath.Join(hostDir, name))
				if err != nil {
					t.Fatal(err)
				}
				writeFile(t, d, name, string(b))
			}
			if c.file != "" {
				writeFile(t, d, "gcprobe.go", c.file)
			}
			gorun(d, append([]string{"mod", "edit"}, c.edit...)...)
			gorun(d, "mod", "tidy")
			after := buildList(t, gorun(d, "list", "-m", "-json", "all"))
			raised, added, dropped := compare(before, after)
			graph := string(gorun(d, "mod", "graph"))
			hostOwn := 0
			for _, m := range raised {
				// Who requires the new version: a module the host had
				// at that very version before (its go.mod now listed in
				// the host's, because gcprobe imports one of its
				// packages) raises it through the host's own
				// requirements; anything else is gcprobe's doing.
				path, now := raisedTo(m)
				var own, ours []string
				for _, from := range requirers(graph, path+"@"+now) {
					fp, fv, _ := strings.Cut(from, "@")
					if before[fp] == fv {
						own = append(own, from)
					} else {
						ours = append(ours, from)
					}
				}
				if len(ours) == 0 && len(own) > 0 {
					t.Logf("raised through the host's own modules (required by %s, which the host already selects at that version): %s", strings.Join(own, ", "), m)
					hostOwn++
					continue
				}
				t.Errorf("raised: %s (required by %s)", m, strings.Join(append(ours, own...), ", "))
			}
			t.Logf("%d modules added (new to the host, none of its versions): %s", len(added), strings.Join(added, ", "))
			if len(dropped) > 0 {
				t.Logf("%d modules no longer in the build list: %s", len(dropped), strings.Join(dropped, ", "))
			}
			t.Logf("%d raised by gcprobe, %d raised through the host's own modules, %d added, %d kept of %d (%.0f s)",
				len(raised)-hostOwn, hostOwn, len(added), len(before)-len(dropped)-len(raised), len(before), time.Since(start).Seconds())
		})
	}
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

// requirers returns the modules (path@version, or the main module's path)
// that `go mod graph` shows requiring target (path@version).
func requirers(graph, target string) []string {
	var from []string
	for _, line := range strings.Split(graph, "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[1] == target {
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

func readModFile(t *testing.T, path string) *modfile.File {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := modfile.ParseLax(path, b, nil)
	if err != nil {
		t.Fatal(err)
	}
	return f
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
