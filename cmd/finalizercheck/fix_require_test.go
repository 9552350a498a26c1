package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestFixSaysTheModuleLacksGcprobe: -fix in a module that does not
// require gcprobe rewrites the call and says what to run next, rather
// than leave a build that fails later with nothing said (issue 28).
func TestFixSaysTheModuleLacksGcprobe(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping: builds the command and loads a module (a few seconds); drop -short to run it")
	}
	gocmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("skipping: the go command is not on PATH, and this test builds modules with it")
	}
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "finalizercheck")
	mustRun(t, ".", nil, gocmd, "build", "-o", bin, ".")
	mod := filepath.Join(tmp, "plain")
	if err := os.Mkdir(mod, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(mod, "go.mod"), "module example.com/plain\n\ngo 1.26.0\n")
	file := filepath.Join(mod, "main.go")
	writeFile(t, file, "package main\n\nimport \"runtime\"\n\ntype T struct{ b []byte }\n\nfunc main() {\n\truntime.SetFinalizer(&T{}, func(*T) {})\n}\n")
	env := []string{"GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off"}
	out, err := run(mod, env, bin, "-fix", "./...")
	if err != nil {
		t.Fatalf("-fix: %v\n%s", err, out)
	}
	if !strings.Contains(out, "which this module does not require yet") || !strings.Contains(out, "go get github.com/gcprobe/probe@latest") {
		t.Errorf("-fix says nothing of the missing requirement:\n%s", out)
	}
	if src, _ := os.ReadFile(file); !strings.Contains(string(src), "finalizerwatch.SetFinalizer(") {
		t.Errorf("not rewritten:\n%s", src)
	}
	if gm, _ := os.ReadFile(filepath.Join(mod, "go.mod")); strings.Contains(string(gm), "require") {
		t.Errorf("-fix changed go.mod:\n%s", gm)
	}

	// -diff writes nothing, and says nothing of the requirement.
	writeFile(t, file, "package main\n\nimport \"runtime\"\n\ntype T struct{ b []byte }\n\nfunc main() {\n\truntime.SetFinalizer(&T{}, func(*T) {})\n}\n")
	out, _ = run(mod, env, bin, "-fix", "-diff", "./...")
	if strings.Contains(out, "does not require") {
		t.Errorf("-diff speaks of the requirement:\n%s", out)
	}
}

// TestHelpNamesEveryMode: -h names -deps and -runtime, and says how build
// tags reach the checker.
func TestHelpNamesEveryMode(t *testing.T) {
	for _, want := range []string{"finalizercheck -deps DIR", "finalizercheck -runtime DIR", "GOFLAGS=-tags=list", "must require"} {
		if !strings.Contains(modesUsage, want) {
			t.Errorf("-h lacks %q", want)
		}
	}
}
