package probe_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// hostPinnedCR is the controller-runtime release the host module of
// TestRequiringRootKeepsHostPins pins: an operator a few releases behind the
// one the nested modules of this repository build with.
const hostPinnedCR = "v0.20.4"

// pinnedPrefixes are the module paths whose versions an operator author pins
// to match a cluster (k8s.io/*, controller-runtime) or that weigh a build down
// (gRPC, x/tools). Requiring the root module must move none of them.
var pinnedPrefixes = []string{
	"k8s.io/",
	"sigs.k8s.io/",
	"google.golang.org/grpc ",
	"golang.org/x/tools ",
}

// TestRequiringRootKeepsHostPins is the adoption check of the module split:
// an operator module pinned to controller-runtime v0.20.4 imports the root
// package, finalizerwatch, the Prometheus and pprof exporters and tracing,
// and `go mod tidy` must leave every k8s.io/*, sigs.k8s.io/*, gRPC and
// x/tools requirement it had exactly as it was (or absent, if it was absent).
// It failed before the split: the root module then required
// controller-runtime v0.25.2 and client-go v0.37.0.
//
// It resolves modules through GOPROXY as configured (CI has the proxy); -short
// skips it.
func TestRequiringRootKeepsHostPins(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: this test runs go mod tidy against the module proxy")
	}
	gocmd, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("go command not on PATH: %v", err)
	}
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	host := t.TempDir()
	tidy := func(step string) string {
		t.Helper()
		cmd := exec.Command(gocmd, "mod", "tidy")
		cmd.Dir = host
		// GOWORK=off: the scratch module is no part of this repository's
		// workspace. GOFLAGS is cleared so that a developer's -mod=vendor or
		// similar cannot change what tidy does.
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: go mod tidy: %v\n%s\n(this test needs the module proxy; -short skips it)", step, err, out)
		}
		b, err := os.ReadFile(filepath.Join(host, "go.mod"))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(host, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// The host as its author has it: controller-runtime pinned, tidied.
	write("go.mod", "module example.com/host\n\ngo 1.26.0\n\nrequire sigs.k8s.io/controller-runtime "+hostPinnedCR+"\n")
	write("main.go", `package main

import _ "sigs.k8s.io/controller-runtime"

func main() {}
`)
	before := tidy("the pinned host alone")
	if got := requirement(before, "sigs.k8s.io/controller-runtime"); got != hostPinnedCR {
		t.Fatalf("the pinned host requires controller-runtime %q after tidy, want %s:\n%s", got, hostPinnedCR, before)
	}

	// The host adds gcprobe's core packages, resolved from this checkout.
	write("go.mod", before+"\nrequire github.com/gcprobe/probe v0.0.0-00010101000000-000000000000\n\nreplace github.com/gcprobe/probe => "+root+"\n")
	write("gcprobe.go", `package main

import (
	_ "github.com/gcprobe/probe"
	_ "github.com/gcprobe/probe/exporters/pprof"
	_ "github.com/gcprobe/probe/exporters/prometheus"
	_ "github.com/gcprobe/probe/finalizerwatch"
	_ "github.com/gcprobe/probe/tracing"
)
`)
	after := tidy("the host importing gcprobe")

	beforePins, afterPins := pinnedLines(before), pinnedLines(after)
	for path, was := range beforePins {
		if now, ok := afterPins[path]; !ok {
			t.Errorf("%s %s: dropped by requiring gcprobe", path, was)
		} else if now != was {
			t.Errorf("%s: moved from %s to %s by requiring gcprobe", path, was, now)
		}
	}
	for path, now := range afterPins {
		if _, ok := beforePins[path]; !ok {
			t.Errorf("%s %s: added by requiring gcprobe", path, now)
		}
	}
	if t.Failed() {
		t.Logf("host go.mod before:\n%s\nafter:\n%s", before, after)
	}
	if len(beforePins) < 3 {
		// Guards the test itself: a host that pins nothing proves nothing.
		t.Errorf("the pinned host has only %d pinned requirements: %v", len(beforePins), beforePins)
	}
}

// requirement returns the version a go.mod text requires of path, or "".
func requirement(gomod, path string) string {
	for _, line := range strings.Split(gomod, "\n") {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
		if len(f) >= 2 && f[0] == path {
			return f[1]
		}
	}
	return ""
}

// pinnedLines maps each requirement of a go.mod text whose path starts with
// one of pinnedPrefixes to its version.
func pinnedLines(gomod string) map[string]string {
	pins := map[string]string{}
	for _, line := range strings.Split(gomod, "\n") {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
		if len(f) < 2 || !strings.Contains(f[1], ".") {
			continue
		}
		for _, p := range pinnedPrefixes {
			if strings.HasPrefix(f[0]+" ", p) {
				pins[f[0]] = f[1]
			}
		}
	}
	return pins
}
