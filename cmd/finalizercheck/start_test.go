package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The -start tests build programs that do not import gcprobe, with the
// flags -runtime -start prints, and run them with and without
// GCPROBE_LISTEN.

const leakyProgram = `package main

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"
)

var sink []byte

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-state" {
		// What a stock program holds once it runs: goroutines and sockets.
		time.Sleep(300 * time.Millisecond)
		fmt.Printf("goroutines=%d sockets=%d\n", runtime.NumGoroutine(), sockets())
		return
	}
	for {
		f, err := os.Open(os.Args[0]) // marker: dropped
		if err != nil {
			panic(err)
		}
		_ = f // never closed
		sink = make([]byte, 256<<10)
		time.Sleep(5 * time.Millisecond)
	}
}

func sockets() int {
	n := 0
	fds, _ := os.ReadDir("/proc/self/fd")
	for _, fd := range fds {
		if l, err := os.Readlink("/proc/self/fd/" + fd.Name()); err == nil && strings.HasPrefix(l, "socket:") {
			n++
		}
	}
	return n
}
`

// prepareStart runs -runtime DIR -start -gcprobe <this checkout> in the
// module at moduleDir and returns the printed flags and the output.
func prepareStartMode(t *testing.T, moduleDir string) ([]string, string) {
	t.Helper()
	root := repoRoot(t)
	t.Setenv("GOWORK", "off")
	t.Setenv("GOFLAGS", "")
	t.Chdir(moduleDir)
	var stdout, stderr bytes.Buffer
	if rc := runtimeMain([]string{"-runtime", t.TempDir(), "-start", "-gcprobe", root}, &stdout, &stderr); rc != 0 {
		t.Fatalf("finalizercheck -runtime -start: exit %d: %s", rc, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	flags := strings.Fields(lines[len(lines)-1])
	if len(flags) != 3 || !strings.HasPrefix(flags[0], "-modfile=") || !strings.HasPrefix(flags[1], "-overlay=") || !strings.HasPrefix(flags[2], "-tags=gcprobe_runtime") {
		t.Fatalf("last line %q is not the -modfile, -overlay and -tags flags", lines[len(lines)-1])
	}
	return flags, stdout.String()
}

// treeDigest lists every file under dir with its content, so that a test
// can say nothing there changed.
func treeDigest(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		m[path] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func checkTreeUnchanged(t *testing.T, before map[string]string, dir string) {
	t.Helper()
	after := treeDigest(t, dir)
	for name, b := range before {
		if a, ok := after[name]; !ok {
			t.Errorf("%s was removed", name)
		} else if a != b {
			t.Errorf("%s changed", name)
		}
	}
	for name := range after {
		if _, ok := before[name]; !ok {
			t.Errorf("%s was added", name)
		}
	}
}

// startedProgram is a program started with GCPROBE_LISTEN, and the address
// its probe logged.
type startedProgram struct {
	addr   string
	stderr *bytes.Buffer
}

// runStarted starts bin with args and GCPROBE_LISTEN=127.0.0.1:0, waits for
// the probe's JSON start line on standard error, and stops the program
// when the test ends.
func runStarted(t *testing.T, bin string, args ...string) *startedProgram {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "GCPROBE_LISTEN=127.0.0.1:0", "GCPROBE_LOG_LEVEL=info")
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() {
		cancel()
		cmd.Wait()
		pw.Close()
		<-done
	})
	sp := &startedProgram{stderr: new(bytes.Buffer)}
	found := make(chan string, 1)
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			sp.stderr.WriteString(line + "\n") // read by the test only after done
			var rec struct{ Level, Msg, Addr string }
			if json.Unmarshal([]byte(line), &rec) == nil && strings.HasPrefix(rec.Msg, "gcprobe: started") {
				select {
				case found <- rec.Addr:
				default:
				}
			}
		}
	}()
	select {
	case sp.addr = <-found:
	case <-time.After(30 * time.Second):
		cancel()
		<-done
		t.Fatalf("%s logged no start line within 30 s:\n%s", bin, sp.stderr)
	}
	return sp
}

// pageData fetches the probe's page document.
func pageData(t *testing.T, addr string) (map[string]any, error) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/debug/gcprobe/data.json")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("data.json: %s", resp.Status)
	}
	var d map[string]any
	return d, json.NewDecoder(resp.Body).Decode(&d)
}

// findSite returns the page's site at file:line, or nil.
func findSite(d map[string]any, file string, line int) map[string]any {
	sites, _ := d["sites"].([]any)
	for _, s := range sites {
		m, _ := s.(map[string]any)
		f, _ := m["file"].(string)
		l, _ := m["line"].(float64)
		if strings.HasSuffix(f, file) && int(l) == line {
			return m
		}
	}
	return nil
}

// poll calls f until it returns nil or the deadline passes; then it fails
// with f's last error.
// Not testkit.PollEvery: this module requires nothing of the root module, whose internal packages it would otherwise import.
func poll(t *testing.T, d time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %v", d, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestStartSmallProgram: a program that never imports gcprobe, built with
// -start's flags, names its dropped files at its line when GCPROBE_LISTEN
// is set, and without it holds what the stock build holds (no listener,
// no goroutine more); its go.mod, go.sum and files are untouched.
func TestStartSmallProgram(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program in the runtime mode")
	}
	mod := t.TempDir()
	writeFile(t, filepath.Join(mod, "go.mod"), "module example.com/leaky\n\ngo 1.26.0\n")
	writeFile(t, filepath.Join(mod, "main.go"), leakyProgram)
	line := markerLine(t, filepath.Join(mod, "main.go"), "dropped")
	before := treeDigest(t, mod)

	flags, out := prepareStartMode(t, mod)
	if !strings.Contains(out, "example.com/leaky start gcprobe") {
		t.Errorf("-start does not name the main package it starts in:\n%s", out)
	}
	checkTreeUnchanged(t, before, mod)
	bin := filepath.Join(t.TempDir(), "leaky")
	mustRun(t, mod, nil, "go", goArgs([]string{"build", "-o", bin}, flags, ".")...)
	stock := filepath.Join(t.TempDir(), "leaky-stock")
	mustRun(t, mod, nil, "go", "build", "-o", stock, ".")
	checkTreeUnchanged(t, before, mod)

	// Without GCPROBE_LISTEN: as stock.
	env := []string{"GCPROBE_LISTEN="}
	if got, want := mustRun(t, mod, env, bin, "-state"), mustRun(t, mod, env, stock, "-state"); got != want {
		t.Errorf("without GCPROBE_LISTEN the -start build holds %q, the stock build %q", got, want)
	}

	// With it: the page names the line, in the runtime mode.
	p := runStarted(t, bin)
	poll(t, 60*time.Second, func() error {
		d, err := pageData(t, p.addr)
		if err != nil {
			return err
		}
		if d["runtime_mode"] != true {
			return fmt.Errorf("runtime_mode = %v, want true", d["runtime_mode"])
		}
		s := findSite(d, "main.go", line)
		if s == nil {
			return fmt.Errorf("no site at main.go:%d on the page", line)
		}
		if s["resource"] != "os.File" || s["dropped"].(float64) < 1 {
			return fmt.Errorf("site main.go:%d: resource %v, dropped %v; want os.File dropped", line, s["resource"], s["dropped"])
		}
		return nil
	})
}

// TestStartThirdPartyProgram builds a real server from the module proxy,
// go-httpbin, unmodified, with -start's flags: with GCPROBE_LISTEN its
// page serves its sites in the runtime mode; without it the program
// listens where the stock one does and nowhere else. Its go.mod and
// files are byte-identical afterwards (it has no go.sum, and gets none).
func TestStartThirdPartyProgram(t *testing.T) {
	if testing.Short() {
		t.Skip("downloads and builds a program in the runtime mode")
	}
	const module = "github.com/mccutchen/go-httpbin/v2@v2.26.0"
	out, err := run(t.TempDir(), []string{"GOWORK=off", "GOFLAGS="}, "go", "mod", "download", "-json", module)
	if err != nil {
		t.Skipf("go mod download %s failed (no module proxy?): %v\n%s", module, err, out)
	}
	var dl struct{ Dir string }
	if err := json.Unmarshal([]byte(out), &dl); err != nil || dl.Dir == "" {
		t.Fatalf("go mod download -json: %v\n%s", err, out)
	}
	// As a user has it: a checkout of the module, writable.
	mod := filepath.Join(t.TempDir(), "go-httpbin")
	err = os.CopyFS(mod, os.DirFS(dl.Dir))
	if err != nil {
		t.Fatal(err)
	}
	filepath.WalkDir(mod, func(path string, d fs.DirEntry, err error) error {
		if err == nil {
			os.Chmod(path, map[bool]os.FileMode{true: 0o755, false: 0o644}[d.IsDir()])
		}
		return nil
	})
	before := treeDigest(t, mod)

	flags, _ := prepareStartMode(t, mod)
	bin := filepath.Join(t.TempDir(), "go-httpbin")
	mustRun(t, mod, nil, "go", goArgs([]string{"build", "-o", bin}, flags, "./cmd/go-httpbin")...)
	checkTreeUnchanged(t, before, mod)

	// With GCPROBE_LISTEN: the page, in the runtime mode, names the line
	// of go-httpbin that serves (its listener and the connections it
	// accepts), and /metrics has gcprobe's series alone.
	port := freePort(t)
	p := runStarted(t, bin, "-host", "127.0.0.1", "-port", port)
	poll(t, 60*time.Second, func() error {
		resp, err := http.Get("http://127.0.0.1:" + port + "/get")
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		d, err := pageData(t, p.addr)
		if err != nil {
			return err
		}
		if d["runtime_mode"] != true {
			return fmt.Errorf("runtime_mode = %v, want true", d["runtime_mode"])
		}
		sites, _ := d["sites"].([]any)
		for _, s := range sites {
			m := s.(map[string]any)
			if f, _ := m["file"].(string); strings.HasPrefix(f, mod) && strings.HasSuffix(f, "httpbin/cmd/cmd.go") {
				return nil
			}
		}
		return fmt.Errorf("no site in go-httpbin's httpbin/cmd/cmd.go among %d sites", len(sites))
	})
	resp, err := http.Get("http://" + p.addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Contains(body, []byte("gcprobe_finalizers_registered_total")) || bytes.Contains(body, []byte("\ngo_goroutines ")) {
		t.Errorf("/metrics is not gcprobe's own registry:\n%.800s", body)
	}

	// Without it: the program listens on its own port alone.
	port2 := freePort(t)
	cmd := exec.Command(bin, "-host", "127.0.0.1", "-port", port2)
	cmd.Env = append(os.Environ(), "GCPROBE_LISTEN=")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	poll(t, 30*time.Second, func() error {
		c, err := http.Get("http://127.0.0.1:" + port2 + "/get")
		if err != nil {
			return err
		}
		c.Body.Close()
		return nil
	})
	if ports := listeningPorts(t, cmd.Process.Pid); len(ports) != 1 || ports[0] != port2 {
		t.Errorf("without GCPROBE_LISTEN the program listens on %v, want only its own port %s", ports, port2)
	}
	// The buffer is written by exec's copying goroutine until Wait
	// returns: read it only after.
	cmd.Process.Kill()
	cmd.Wait()
	if strings.Contains(stderr.String(), "gcprobe") {
		t.Errorf("without GCPROBE_LISTEN gcprobe logged:\n%s", stderr.String())
	}
}

// freePort returns a loopback port nothing listens on now.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// listeningPorts returns the TCP ports process pid listens on, from its
// socket descriptors and the kernel's socket tables (Linux).
func listeningPorts(t *testing.T, pid int) []string {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	proc := "/proc/" + strconv.Itoa(pid)
	inodes := map[string]bool{}
	fds, err := os.ReadDir(proc + "/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		if l, err := os.Readlink(proc + "/fd/" + fd.Name()); err == nil {
			if in, ok := strings.CutPrefix(l, "socket:["); ok {
				inodes[strings.TrimSuffix(in, "]")] = true
			}
		}
	}
	var ports []string
	for _, table := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(proc + "/net/" + table)
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(l)
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
			if len(f) < 10 || f[3] != "0A" || !inodes[f[9]] {
				continue
			}
			_, hexPort, _ := strings.Cut(f[1], ":")
			if p, err := strconv.ParseUint(hexPort, 16, 16); err == nil {
				ports = append(ports, strconv.FormatUint(p, 10))
			}
		}
	}
	return ports
}

// TestStartRefusals: what -start cannot do is refused with a message that
// names the flag or the file, and the program's module is left alone.
func TestStartRefusals(t *testing.T) {
	root := repoRoot(t)
	lib := t.TempDir()
	writeFile(t, filepath.Join(lib, "go.mod"), "module example.com/lib\n\ngo 1.26.0\n")
	writeFile(t, filepath.Join(lib, "lib.go"), "package lib\n")
	taken := t.TempDir()
	writeFile(t, filepath.Join(taken, "go.mod"), "module example.com/taken\n\ngo 1.26.0\n")
	writeFile(t, filepath.Join(taken, "main.go"), "package main\n\nfunc main() {}\n")
	writeFile(t, filepath.Join(taken, startFile), "package main\n")
	for _, tt := range []struct {
		name, dir string
		args      []string
		want      string
	}{
		{"-gcprobe without -start", lib, []string{"-gcprobe", root}, "give -start too"},
		{"-gcprobe not gcprobe", lib, []string{"-start", "-gcprobe", lib}, "not a checkout of github.com/gcprobe/probe"},
		{"no main package", lib, []string{"-start", "-gcprobe", root}, "has no main package"},
		{"start file taken", taken, []string{"-start", "-gcprobe", root}, startFile + " exists"},
		{"inside the module", taken, []string{"-start", "-gcprobe", root, "-runtime", filepath.Join(taken, "rt")}, "inside the main module"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("GOWORK", "off")
			t.Setenv("GOFLAGS", "")
			t.Chdir(tt.dir)
			before := treeDigest(t, tt.dir)
			var stdout, stderr bytes.Buffer
			args := append([]string{"-runtime", t.TempDir()}, tt.args...)
			if rc := runtimeMain(args, &stdout, &stderr); rc == 0 || !strings.Contains(stderr.String(), tt.want) {
				t.Errorf("exit %d, stderr %q; want an error saying %q", rc, stderr.String(), tt.want)
			}
			checkTreeUnchanged(t, before, tt.dir)
		})
	}
}
