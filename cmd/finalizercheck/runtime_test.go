package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// repoRoot is the root module's directory, two levels up.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "finalizerwatch", "rtlink_on.go")); err != nil {
		t.Fatalf("the runtime mode's tests run in the gcprobe repository: %v", err)
	}
	return root
}

// prepareRuntimeMode runs -runtime into a temporary directory and returns
// the flags it printed on its last line.
func prepareRuntimeMode(t *testing.T, extra ...string) []string {
	t.Helper()
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	args := append([]string{"-runtime", dir}, extra...)
	if rc := runtimeMain(args, &stdout, &stderr); rc != 0 {
		t.Fatalf("finalizercheck -runtime: exit %d: %s", rc, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	flags := strings.Fields(lines[len(lines)-1])
	if len(flags) != 2 || !strings.HasPrefix(flags[0], "-overlay=") || !strings.HasPrefix(flags[1], "-tags=gcprobe_runtime") {
		t.Fatalf("last line %q is not the -overlay and -tags flags", lines[len(lines)-1])
	}
	return flags
}

// goArgs joins go command arguments around the mode's flags.
func goArgs(before []string, flags []string, after ...string) []string {
	return append(append(append([]string(nil), before...), flags...), after...)
}

// scratchModule writes the test program and its dependency into a module
// of their own that requires gcprobe from this repository, as a user's
// module would.
func scratchModule(t *testing.T, root string) string {
	t.Helper()
	dir := t.TempDir()
	write := func(name, content string) {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	copyFile := func(src, dst string) {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		write(dst, string(b))
	}
	write("go.mod", "module example.com/rtmode\n\ngo 1.26.0\n\nrequire (\n\tgithub.com/gcprobe/probe v0.0.0\n\texample.com/dep v0.0.0\n)\n\n"+
		"replace github.com/gcprobe/probe => "+root+"\n\nreplace example.com/dep => ./dep\n")
	write("dep/go.mod", "module example.com/dep\n\ngo 1.26.0\n")
	copyFile(filepath.Join("testdata", "rtmode", "main.go.txt"), "rtmode/main.go")
	copyFile(filepath.Join("testdata", "rtmode", "forced.go.txt"), "rtmode/forced.go")
	copyFile(filepath.Join("testdata", "rtmode", "dep", "dep.go.txt"), "dep/dep.go")
	copyFile(filepath.Join("testdata", "rtmode", "probe", "main.go.txt"), "rtprobe/main.go")
	// The root module's go.sum lets the scratch module resolve its
	// requirements without asking the network for what the root already has.
	copyFile(filepath.Join(root, "go.sum"), "go.sum")
	return dir
}

func goRun(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), append([]string{"GOWORK=off", "GOFLAGS=-mod=mod"}, env...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// siteLine finds the program's line for kind at line n.
func siteLine(out, kind string, line int) map[string]string {
	re := regexp.MustCompile(`(?m)^site ` + kind + ` \S+:` + strconv.Itoa(line) + ` (.*)$`)
	m := re.FindStringSubmatch(out)
	if m == nil {
		return nil
	}
	fields := map[string]string{}
	for _, f := range strings.Fields(m[1]) {
		k, v, _ := strings.Cut(f, "=")
		fields[k] = strings.Trim(v, `"`)
	}
	return fields
}

// TestRuntimeModeEndToEnd builds a program that opens files, dials
// connections and uses a dependency that calls runtime.SetFinalizer,
// none of it through finalizerwatch, with the flag -runtime prints, and
// checks that every registration is counted at its line: files kept open
// outstanding, files and connections dropped without Close counted
// dropped, closed ones cleared, the dependency at its own line. Then the
// same with -race, with -trimpath and CGO_ENABLED=0, and without the flag,
// where nothing changes from a plain build.
func TestRuntimeModeEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the standard library with a patched runtime")
	}
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		t.Skipf("the end-to-end test runs on amd64 and arm64 (GOARCH=%s)", runtime.GOARCH)
	}
	root := repoRoot(t)
	flags := prepareRuntimeMode(t)
	dir := scratchModule(t, root)

	check := func(t *testing.T, out string) {
		t.Helper()
		if !strings.Contains(out, "runtime mode: true") {
			t.Fatalf("the program does not run in the runtime mode:\n%s", out)
		}
		want := []struct {
			kind string
			line int
			res  map[string]string
		}{
			{"finalizer", 31, map[string]string{"res": "os.File", "reg": "20", "exec": "20", "dropped": "20", "out": "0"}},
			{"finalizer", 35, map[string]string{"res": "os.File", "reg": "5", "out": "5", "dropped": "0"}},
			{"finalizer", 39, map[string]string{"res": "os.File", "reg": "7", "clr": "7", "out": "0", "dropped": "0"}},
			{"finalizer", 12, map[string]string{"res": "", "reg": "10", "exec": "10", "dropped": "0"}},
			{"finalizer", 47, map[string]string{"res": "net.Conn", "reg": "4", "exec": "4", "dropped": "4"}},
			// Dialed on net/http's dial goroutine, at the http.Get line.
			{"finalizer", 59, map[string]string{"res": "net.Conn_(HTTP_client)", "reg": "8", "out": "8", "dropped": "0"}},
			// Accepted on the goroutine the go statement started.
			{"finalizer", 55, map[string]string{"res": "net.Conn_(accepted)", "dropped": "0"}},
		}
		// No site of the standard library's, nor one without a line of
		// the program's, has connections outstanding; the server's
		// accepted side of the unclosed bodies ranks below the client's
		// line (the program prints the sites in rank order).
		if strings.Contains(out, "other site ") {
			t.Errorf("a site outside the program holds registrations:\n%s", out)
		}
		if c, s := strings.Index(out, " main.main:59 "), strings.Index(out, " main.main:55 "); c < 0 || s < 0 || s < c {
			t.Errorf("the server's accepted connections (line 55) do not rank below the client line that keeps them (59):\n%s", out)
		}
		// The lines that forced GC cycles: runtime.GC's loop in main.go,
		// FreeOSMemory's caller in forced.go (not runtime/debug), and no
		// other.
		if !strings.Contains(out, "forced gc counting: true\n") {
			t.Errorf("the forced GC cycles are not counted:\n%s", out)
		}
		forced := regexp.MustCompile(`(?m)^forced \S+ \S+:\d+ calls=\d+$`).FindAllString(out, -1)
		if want := []string{"forced main.go main.main:68 calls=6", "forced forced.go main.printForced:17 calls=3"}; !slices.Equal(forced, want) {
			t.Errorf("forced GC lines %q, want %q", forced, want)
		}
		for _, w := range want {
			got := siteLine(out, w.kind, w.line)
			if got == nil {
				t.Errorf("no %s site at line %d:\n%s", w.kind, w.line, out)
				continue
			}
			for k, v := range w.res {
				if got[k] != v {
					t.Errorf("%s line %d: %s = %q, want %q (%v)", w.kind, w.line, k, got[k], v, got)
				}
			}
		}
	}
	t.Run("default", func(t *testing.T) { check(t, goRun(t, dir, nil, goArgs([]string{"run"}, flags, "./rtmode")...)) })
	t.Run("race", func(t *testing.T) {
		check(t, goRun(t, dir, nil, goArgs([]string{"run", "-race"}, flags, "./rtmode")...))
	})
	t.Run("trimpath nocgo", func(t *testing.T) {
		check(t, goRun(t, dir, []string{"CGO_ENABLED=0"}, goArgs([]string{"run", "-trimpath"}, flags, "./rtmode")...))
	})
	t.Run("GOFLAGS", func(t *testing.T) {
		check(t, goRun(t, dir, []string{"GOFLAGS=-mod=mod " + strings.Join(flags, " ")}, "run", "./rtmode"))
	})
	t.Run("another gcprobe version's hooks", func(t *testing.T) {
		// The runtime patched by a finalizercheck of another version: the
		// probe refuses to attach, loudly, rather than count nothing.
		other := prepareRuntimeMode(t)
		hooks := filepath.Join(filepath.Dir(strings.TrimPrefix(other[0], "-overlay=")), "runtime", "gcprobe_hooks.go")
		b, err := os.ReadFile(hooks)
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`(?m)^const gcprobeHookVersion = ([0-9]+)\n`).FindSubmatch(b)
		if m == nil {
			t.Fatal("the patch's gcprobe_hooks.go declares no gcprobeHookVersion")
		}
		b = bytes.Replace(b, m[0], []byte("const gcprobeHookVersion = 99\n"), 1)
		if err := os.WriteFile(hooks, b, 0o644); err != nil {
			t.Fatal(err)
		}
		out := goRun(t, dir, nil, goArgs([]string{"run"}, other, "./rtmode")...)
		if !strings.Contains(out, "hooks are version 99, and this gcprobe's are version "+string(m[1])) || !strings.Contains(out, "runtime mode: false") {
			t.Fatalf("a runtime of another hook version was not refused, or the mode was claimed:\n%s", out)
		}
	})
	// A build with the tag whose runtime is not the patched one must not
	// link, rather than claim a mode that counts nothing: the tag alone
	// (the overlay forgotten), and the overlay written for another
	// toolchain (GOTOOLCHAIN or a go.mod toolchain line switched the
	// go command to one whose files the overlay does not name).
	refused := func(t *testing.T, args ...string) {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "runtime.gcprobePatchedRuntime") {
			t.Fatalf("go %s: want a link error naming runtime.gcprobePatchedRuntime, got err %v:\n%s", strings.Join(args, " "), err, out)
		}
		if strings.Contains(string(out), "runtime mode: true") {
			t.Fatalf("the program ran and claimed the mode:\n%s", out)
		}
	}
	t.Run("the tag without the overlay", func(t *testing.T) {
		refused(t, "run", flags[1], "./rtmode")
	})
	t.Run("another toolchain's overlay", func(t *testing.T) {
		overlay := strings.TrimPrefix(flags[0], "-overlay=")
		b, err := os.ReadFile(overlay)
		if err != nil {
			t.Fatal(err)
		}
		goroot := strings.TrimSpace(goRun(t, dir, nil, "env", "GOROOT"))
		elsewhere := filepath.Join(t.TempDir(), "go1.99.0", "overlay.json")
		b = bytes.ReplaceAll(b, []byte(`"`+filepath.Join(goroot, "src")+"/"), []byte(`"/opt/another-go/src/`))
		if !bytes.Contains(b, []byte("/opt/another-go/src/runtime/gcprobe_hooks.go")) {
			t.Fatalf("could not move the overlay to another toolchain's paths:\n%s", b)
		}
		if err := os.MkdirAll(filepath.Dir(elsewhere), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(elsewhere, b, 0o644); err != nil {
			t.Fatal(err)
		}
		refused(t, "run", "-overlay="+elsewhere, flags[1], "./rtmode")
	})
	t.Run("without the flag", func(t *testing.T) {
		out := goRun(t, dir, nil, "run", "./rtmode")
		if !strings.Contains(out, "runtime mode: false") || !strings.Contains(out, "not built in the runtime build mode") {
			t.Fatalf("without the flag the program should run as a plain build:\n%s", out)
		}
	})
}

// TestRuntimeModeRefusesAnUnverifiedRuntime gives -runtime a toolchain
// whose mfinal.go differs from the one the patch was verified against:
// it must refuse, naming what it could not find, and write no overlay.
func TestRuntimeModeRefusesAnUnverifiedRuntime(t *testing.T) {
	goroot := t.TempDir()
	src := filepath.Join(runtime.GOROOT(), "src", "runtime")
	dst := filepath.Join(goroot, "src", "runtime")
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"mfinal.go", "mheap.go", "mcleanup.go"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		if f == "mfinal.go" {
			// A vendor's patch, or another Go version: the registration
			// no longer reads as the patch expects.
			b = bytes.Replace(b, []byte("\tcallerpc := sys.GetCallerPC()\n"), []byte("\tcallerpc := sys.GetCallerPC() // changed\n"), 1)
		}
		if err := os.WriteFile(filepath.Join(dst, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	rc := runtimeMain([]string{"-runtime", out, "-goroot", goroot}, &stdout, &stderr)
	if rc == 0 {
		t.Fatalf("-runtime accepted a runtime it cannot have verified:\n%s", stdout.String())
	}
	for _, w := range []string{"runtime/mfinal.go", "SetFinalizer's registration", "refusing to build a runtime it did not verify"} {
		if !strings.Contains(stderr.String(), w) {
			t.Errorf("refusal %q lacks %q", stderr.String(), w)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "overlay.json")); err == nil {
		t.Error("an overlay was written for a runtime that was refused")
	}
}

// TestRuntimeModeRefusesWhatForcedGCReliesOn gives -runtime a toolchain
// whose runtime.GC, or whose debug.FreeOSMemory's way into it, differs
// from the one the patch was verified against: it refuses, naming the
// function, rather than count some forced cycles and miss others. A
// verified toolchain gets mgc.go patched and runtime/debug left alone.
func TestRuntimeModeRefusesWhatForcedGCReliesOn(t *testing.T) {
	src := filepath.Join(runtime.GOROOT(), "src", "runtime")
	files := map[string]bool{}
	for _, jp := range joinPoints {
		files[jp.file] = true
	}
	for _, tt := range []struct {
		name, file, find, replace, want string
	}{
		{"verified", "", "", "", ""},
		{"GC", "mgc.go", "\tn := work.cycles.Load()\n\tgcWaitOnMark(n)\n", "\tn := work.cycles.Load()\n\tgcWaitOnMark(n) // changed\n", "runtime/mgc.go does not have runtime.GC"},
		{"freeOSMemory", "mheap.go", "func runtime_debug_freeOSMemory() {\n\tGC()\n", "func runtime_debug_freeOSMemory() {\n\tgcStart(gcTrigger{kind: gcTriggerCycle})\n", "runtime/mheap.go does not have runtime/debug.freeOSMemory"},
		{"FreeOSMemory", "debug/garbage.go", "func FreeOSMemory() {\n\tfreeOSMemory()\n}\n", "func FreeOSMemory() {\n\tfreeOSMemory2()\n}\n", "runtime/debug/garbage.go does not have debug.FreeOSMemory"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			goroot := t.TempDir()
			for f := range files {
				b, err := os.ReadFile(filepath.Join(src, filepath.FromSlash(f)))
				if err != nil {
					t.Fatal(err)
				}
				if f == tt.file {
					if !bytes.Contains(b, []byte(tt.find)) {
						t.Fatalf("runtime/%s lacks %q", f, tt.find)
					}
					b = bytes.Replace(b, []byte(tt.find), []byte(tt.replace), 1)
				}
				dst := filepath.Join(goroot, "src", "runtime", filepath.FromSlash(f))
				if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(dst, b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			out := t.TempDir()
			var stdout, stderr bytes.Buffer
			rc := runtimeMain([]string{"-runtime", out, "-goroot", goroot}, &stdout, &stderr)
			if tt.want == "" {
				if rc != 0 {
					t.Fatalf("-runtime refused the toolchain's own runtime: %s", stderr.String())
				}
				mgc, err := os.ReadFile(filepath.Join(out, "runtime", "mgc.go"))
				if err != nil || !bytes.Contains(mgc, []byte("\tgcprobeForcedGC(sys.GetCallerPC())\n")) {
					t.Errorf("mgc.go not patched with the forced GC hook (%v)", err)
				}
				if _, err := os.Stat(filepath.Join(out, "runtime", "garbage.go")); err == nil || strings.Contains(stdout.String(), "garbage.go") {
					t.Errorf("runtime/debug's garbage.go, only checked, was written:\n%s", stdout.String())
				}
				return
			}
			if rc == 0 {
				t.Fatalf("-runtime accepted a runtime it cannot have verified:\n%s", stdout.String())
			}
			if !strings.Contains(stderr.String(), tt.want) || !strings.Contains(stderr.String(), "refusing to build a runtime it did not verify") {
				t.Errorf("refusal %q lacks %q", stderr.String(), tt.want)
			}
			if _, err := os.Stat(filepath.Join(out, "overlay.json")); err == nil {
				t.Error("an overlay was written for a runtime that was refused")
			}
		})
	}
}

// TestRuntimeModeMergesTheUsersOverlay merges a user's overlay, and
// refuses one that replaces a file the mode replaces.
func TestRuntimeModeMergesTheUsersOverlay(t *testing.T) {
	dir := t.TempDir()
	user := filepath.Join(dir, "user.json")
	os.WriteFile(user, []byte(`{"Replace":{"/x/a.go":"/y/a.go"}}`), 0o644)
	flags := prepareRuntimeMode(t, "-overlay", user)
	b, err := os.ReadFile(strings.TrimPrefix(flags[0], "-overlay="))
	if err != nil {
		t.Fatal(err)
	}
	var o struct{ Replace map[string]string }
	if err := json.Unmarshal(b, &o); err != nil {
		t.Fatal(err)
	}
	if o.Replace["/x/a.go"] != "/y/a.go" {
		t.Errorf("the user's overlay entry is missing from %s", b)
	}
	conflict := filepath.Join(dir, "conflict.json")
	mfinal := filepath.Join(runtime.GOROOT(), "src", "runtime", "mfinal.go")
	os.WriteFile(conflict, []byte(`{"Replace":{`+strconvQuote(mfinal)+`:"/y/mfinal.go"}}`), 0o644)
	var stdout, stderr bytes.Buffer
	if rc := runtimeMain([]string{"-runtime", t.TempDir(), "-overlay", conflict}, &stdout, &stderr); rc == 0 ||
		!strings.Contains(stderr.String(), "refusing to choose one") {
		t.Errorf("a conflicting overlay was not refused: exit %d, %s", rc, stderr.String())
	}
}

func strconvQuote(s string) string { b, _ := json.Marshal(s); return string(b) }

// TestRuntimeModeMergesTheUsersTags: a build takes one -tags, so the
// printed one holds the user's tags, from GOFLAGS and from -tags.
func TestRuntimeModeMergesTheUsersTags(t *testing.T) {
	t.Setenv("GOFLAGS", "-tags=fromenv,shared")
	flags := prepareRuntimeMode(t, "-tags", "shared,mine")
	if flags[1] != "-tags=gcprobe_runtime,fromenv,shared,mine" {
		t.Errorf("printed %s, want -tags=gcprobe_runtime,fromenv,shared,mine", flags[1])
	}
}

// TestRuntimeModeRefusesAToolchainInTheModuleCache: the go command lets no
// overlay replace a file beneath GOMODCACHE, where GOTOOLCHAIN puts the
// toolchains it downloads; -runtime says so instead of printing flags that
// fail.
func TestRuntimeModeRefusesAToolchainInTheModuleCache(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("GOMODCACHE", cache)
	goroot := filepath.Join(cache, "golang.org", "toolchain@v0.0.1-go1.99.0.linux-amd64")
	var stdout, stderr bytes.Buffer
	if rc := runtimeMain([]string{"-runtime", t.TempDir(), "-goroot", goroot}, &stdout, &stderr); rc == 0 ||
		!strings.Contains(stderr.String(), "lives in the module cache") || !strings.Contains(stderr.String(), "outside the module cache") {
		t.Errorf("exit %d, %q: want a refusal that says the toolchain is in the module cache and what to do", rc, stderr.String())
	}
}

// TestHookTableLayout compares the runtime's hook table in the patch with
// finalizerwatch's: the two sides must agree field for field.
func TestHookTableLayout(t *testing.T) {
	root := repoRoot(t)
	tmpl, err := rtTemplates.ReadFile("rtpatch/gcprobe_hooks.go.tmpl")
	if err != nil {
		t.Fatal(err)
	}
	side, err := os.ReadFile(filepath.Join(root, "finalizerwatch", "runtime.go"))
	if err != nil {
		t.Fatal(err)
	}
	link, err := os.ReadFile(filepath.Join(root, "finalizerwatch", "rtlink_on.go"))
	if err != nil {
		t.Fatal(err)
	}
	fields := func(src []byte, typ string) string {
		re := regexp.MustCompile(`(?s)type ` + typ + ` struct \{(.*?)\n\}`)
		m := re.FindSubmatch(src)
		if m == nil {
			t.Fatalf("no struct %s", typ)
		}
		return strings.Join(strings.Fields(string(m[1])), " ")
	}
	if a, b := fields(tmpl, "gcprobeHookTable"), fields(side, "rtHookTable"); a != b {
		t.Errorf("hook tables differ:\nruntime:       %s\nfinalizerwatch: %s", a, b)
	}
	version := func(src []byte, name string) string {
		m := regexp.MustCompile(name + ` = (\d+)`).FindSubmatch(src)
		if m == nil {
			t.Fatalf("no %s", name)
		}
		return string(m[1])
	}
	if a, b := version(tmpl, "gcprobeHookVersion"), version(side, "rtHookVersion"); a != b {
		t.Errorf("hook versions differ: runtime %s, finalizerwatch %s", a, b)
	}
	// The tag the printed flags set selects the file that links to the
	// runtime's variable, by its name in the patch.
	if !bytes.Contains(link, []byte("//go:build "+runtimeTag+"\n")) || !bytes.Contains(link, []byte("runtime.gcprobeHooks")) ||
		!bytes.Contains(tmpl, []byte("var gcprobeHooks unsafe.Pointer")) {
		t.Error("finalizerwatch/rtlink_on.go is not built by the tag, or does not link runtime.gcprobeHooks")
	}
}

// TestRuntimeModeThroughTheProbe runs a program that starts the probe and
// keeps files open, more each GC cycle, at one line and drops them without
// Close at another, none of it through finalizerwatch: the Report, /metrics,
// the live page and the profile name both lines, the first growing and the
// second dropped, a leak (go tool pprof -top's default view lists both), and
// the runtime's finalizers are all watched.
func TestRuntimeModeThroughTheProbe(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the standard library with a patched runtime")
	}
	root := repoRoot(t)
	flags := prepareRuntimeMode(t)
	dir := scratchModule(t, root)
	prof := filepath.Join(t.TempDir(), "finalizers.pb.gz")
	out := goRun(t, dir, nil, goArgs([]string{"run"}, flags, "./rtprobe", prof)...)
	for _, w := range []*regexp.Regexp{
		regexp.MustCompile(`runtime build mode: every registration in the binary is counted`),
		regexp.MustCompile(`main\.main main\.go:32 \(os\.File\)\s+finalizer\s+growing\s+\+\d+\s+160\s+0\s+160`),
		regexp.MustCompile(`main\.main main\.go:36 \(os\.File\)\s+finalizer\s+dropped\s`),
		regexp.MustCompile(`(?m)^leak at main\.main \S+/rtprobe/main\.go:36: 48 files dropped without Close, each held open until the GC found it: close them where they are opened`),
		regexp.MustCompile(`(?m)^runtime_mode=true$`),
		regexp.MustCompile(`(?m)^page site: main\.main \S+/rtprobe/main\.go:36 class=churn verdict=dropped registered=48 dropped=48 words="48 files dropped without Close, `),
		regexp.MustCompile(`(?m)^page site: main\.main \S+/rtprobe/main\.go:32 class=growing verdict=growing registered=160 dropped=0 words=""$`),
		regexp.MustCompile(`(?m)^gcprobe_finalizers_registered_total\{kind="finalizer",site="main\.main \S+/rtprobe/main\.go:32"\} 160$`),
		regexp.MustCompile(`(?m)^gcprobe_finalizers_dropped_total\{kind="finalizer",resource="os\.File",site="main\.main \S+/rtprobe/main\.go:36"\} 48$`),
		regexp.MustCompile(`(?m)^gcprobe_finalizers_dropped_total\{kind="finalizer",resource="os\.File",site="main\.main \S+/rtprobe/main\.go:32"\} 0$`),
		regexp.MustCompile(`(?m)^gcprobe_finalizers_unwatched_total\{kind="finalizer"\} 0$`),
	} {
		if !w.MatchString(out) {
			t.Errorf("output lacks %s", w)
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s", out)
	}
	top, err := exec.Command("go", "tool", "pprof", "-top", "-lines", "-sample_index=outstanding", prof).CombinedOutput()
	if err != nil {
		t.Fatalf("go tool pprof: %v\n%s", err, top)
	}
	if !regexp.MustCompile(`(?m)\b160\s.*main\.main \S+main\.go:32\b`).Match(top) {
		t.Errorf("the profile does not show the 160 files outstanding at main.go:32:\n%s", top)
	}
	// The default view (leaked) lists both leaks: the files kept open at
	// line 32 by their suspects, the 48 dropped at line 36 (a view that
	// the growth sample alone left empty for line 36).
	top, err = exec.Command("go", "tool", "pprof", "-top", "-lines", prof).CombinedOutput()
	if err != nil {
		t.Fatalf("go tool pprof: %v\n%s", err, top)
	}
	for _, w := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^Type: leaked$`),
		// The cum column: the stacks begin at os.newFile.
		regexp.MustCompile(`\s48\s+[\d.]+%\s+main\.main \S+main\.go:36\b`),
		regexp.MustCompile(`\s[1-9]\d*\s+[\d.]+%\s+main\.main \S+main\.go:32\b`),
	} {
		if !w.Match(top) {
			t.Errorf("go tool pprof -top -lines lacks %s:\n%s", w, top)
		}
	}
	// Registration stacks begin at the frame that called the runtime
	// (os.newFile), never inside the hooks.
	if bytes.Contains(top, []byte("gcprobe_hooks.go")) || bytes.Contains(top, []byte("finalizerwatch.rt")) {
		t.Errorf("the profile's stacks hold the hooks' frames:\n%s", top)
	}
}

// TestRuntimeModeHelp runs the -runtime mode with a help flag, or another
// flag, where its directory goes: -runtime -h, which -h itself suggests,
// prints the mode's usage, and a flag-looking directory is refused; either
// way nothing is created.
func TestRuntimeModeHelp(t *testing.T) {
	for _, tt := range []struct {
		name string
		give []string
		want int    // exit status
		err  string // in standard error
	}{
		{"-h", []string{"-runtime", "-h"}, 0, "usage: finalizercheck -runtime DIR"},
		{"-help", []string{"-runtime", "-help"}, 0, "usage: finalizercheck -runtime DIR"},
		{"--help", []string{"-runtime", "--help"}, 0, "usage: finalizercheck -runtime DIR"},
		{"--runtime -h", []string{"--runtime", "-h"}, 0, "usage: finalizercheck -runtime DIR"},
		{"-runtime=-h", []string{"-runtime=-h"}, 0, "usage: finalizercheck -runtime DIR"},
		{"-h, then flags", []string{"-runtime", "-h", "-tags", "x"}, 0, "usage: finalizercheck -runtime DIR"},
		{"-tags as DIR", []string{"-runtime", "-tags", "x"}, 1, "-runtime takes a directory, not the flag -tags"},
		{"-overlay as DIR", []string{"-runtime", "-overlay"}, 1, "-runtime takes a directory, not the flag -overlay"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runInEmptyDir(t, func(stdout, stderr io.Writer) int {
				return runtimeMain(tt.give, stdout, stderr)
			})
			if code != tt.want || !strings.Contains(stderr, tt.err) || stdout != "" {
				t.Errorf("finalizercheck %s: exit status %d, stdout %q, stderr:\n%s\nwant exit status %d, nothing on stdout, %q on stderr",
					strings.Join(tt.give, " "), code, stdout, stderr, tt.want, tt.err)
			}
		})
	}
}

// runInEmptyDir runs f in an empty working directory, fails the test if f
// leaves anything there, and returns f's exit status and output.
func runInEmptyDir(t *testing.T, f func(stdout, stderr io.Writer) int) (code int, stdout, stderr string) {
	t.Helper()
	dir := t.TempDir()
	t.Chdir(dir)
	var o, e bytes.Buffer
	code = f(&o, &e)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, ent := range entries {
		t.Errorf("created %s in the working directory", ent.Name())
	}
	return code, o.String(), e.String()
}
