package deploy

import (
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gcprobe/probe"
	"github.com/gcprobe/probe/heapprofile"
	"github.com/gcprobe/probe/internal/testkit"
	"github.com/gcprobe/probe/memstats"
)

var e2eSink []byte

// e2eAllocLoop allocates 256 KiB a millisecond or so in 16 KiB objects at
// one line, until stop: about 200 MB/s, enough GC cycles for
// allocation_driven, without taking a whole CPU of a shared machine.
func e2eAllocLoop(stop <-chan struct{}) {
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		for range 16 {
			e2eSink = make([]byte, 16<<10) // marker: e2e-alloc
		}
	}
}

// TestGCCauseThroughPrometheus runs the real probe next to an allocation
// loop, has a real Prometheus scrape its /metrics, and checks what an
// operator would query: the allocation_driven detector firing and the top
// allocating site naming the loop's line; then go tool pprof -top on the
// probe's delta allocation profile names it too.
func TestGCCauseThroughPrometheus(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Prometheus server and an allocation loop: skipped with -short")
	}
	bin := prometheusServer(t)
	line := testkit.MarkerLine(t, "gccause_e2e_test.go", "e2e-alloc")
	wantSite := fmt.Sprintf("github.com/gcprobe/probe/deploy.e2eAllocLoop %s:%d", mustAbs(t, "gccause_e2e_test.go"), line)

	p, err := probe.Start(probe.WithRegisterer(prometheus.NewRegistry()), probe.WithListenAddr("127.0.0.1:0"),
		probe.WithSamplerOptions(memstats.WithRateWindow(3*time.Second), memstats.WithInterval(250*time.Millisecond)),
		probe.WithHeapProfileOptions(heapprofile.WithInterval(500*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(stop)
	wg.Go(func() { e2eAllocLoop(stop) })

	dir := t.TempDir()
	config := filepath.Join(dir, "prometheus.yml")
	err = os.WriteFile(config, fmt.Appendf(nil, `global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: app
    static_configs:
      - targets: [%q]
`, p.Addr().String()), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	addr := freeLoopbackAddr(t)
	logPath := filepath.Join(dir, "prometheus.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.CommandContext(t.Context(), bin,
		"--config.file="+config,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--log.level=warn")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Wait() })

	api := "http://" + addr
	query := func(expr string) ([]map[string]string, error) {
		var body struct {
			Status string `json:"status"`
			Error  string `json:"error"`
			Data   struct {
				Result []struct {
					Metric map[string]string `json:"metric"`
				} `json:"result"`
			} `json:"data"`
		}
		if err := getJSON(api+"/api/v1/query?query="+url.QueryEscape(expr), &body); err != nil {
			return nil, err
		}
		if body.Status != "success" {
			return nil, fmt.Errorf("query %s: %s", expr, body.Error)
		}
		var ms []map[string]string
		for _, r := range body.Data.Result {
			ms = append(ms, r.Metric)
		}
		return ms, nil
	}
	// Target discovery and the first scrapes take seconds: poll, bounded,
	// every 250ms, as an external process is polled.
	testkit.PollEvery(t, 90*time.Second, 250*time.Millisecond, "allocation_driven firing with "+wantSite+" on top", func() (bool, string) {
		firing, err1 := query(`gcprobe_detector_firing{detector="allocation_driven"} == 1`)
		top, err2 := query(`topk(1, gcprobe_alloc_site_bytes_per_second)`)
		var state string
		switch {
		case err1 != nil || err2 != nil:
			state = fmt.Sprint(err1, err2)
		case len(firing) == 0:
			state = "allocation_driven not firing"
		case len(top) == 0:
			state = "no gcprobe_alloc_site_bytes_per_second"
		case top[0]["site"] != wantSite:
			state = "top allocating site " + top[0]["site"]
		default:
			return true, ""
		}
		logs, _ := os.ReadFile(logPath)
		return false, fmt.Sprintf("%s\nprometheus log:\n%s", state, logs)
	})

	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH for go tool pprof")
	}
	pp := exec.Command(goTool, "tool", "pprof", "-top", "http://"+p.Addr().String()+probe.AllocsProfilePath)
	pp.Env = append(os.Environ(), "PPROF_TMPDIR="+t.TempDir())
	out, err := pp.CombinedOutput()
	if err != nil {
		t.Fatalf("go tool pprof -top: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "Type: alloc_space") || !strings.Contains(string(out), "deploy.e2eAllocLoop") {
		t.Errorf("go tool pprof -top on %s does not name the loop:\n%s", probe.AllocsProfilePath, out)
	}
}

func mustAbs(t *testing.T, file string) string {
	t.Helper()
	abs, err := filepath.Abs(file)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}
