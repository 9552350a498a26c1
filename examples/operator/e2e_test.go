package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/pprof/profile"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/gcprobe/probe/examples/operator/internal/controller"

	"github.com/gcprobe/probe/internal/testkit"
)

// freeAddr returns a loopback address with a port free a moment ago. The
// manager's metrics server does not report the port it bound, so the test
// picks one; the window in which another process could take it is short.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// scraper is an HTTPS client of the metrics server with a bearer token
// ("" for none). The server's certificate is self-signed and the
// connection is to loopback, hence InsecureSkipVerify.
type scraper struct {
	base  string
	token string
	c     *http.Client
}

func (s scraper) get(path string) (int, []byte, error) {
	req, err := http.NewRequest(http.MethodGet, s.base+path, nil)
	if err != nil {
		return 0, nil, err
	}
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	resp, err := s.c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// The deployment of config/default, as the manifests name it.
const (
	deployNamespace  = "gcprobe-example"
	deployName       = "gcprobe-example-operator"
	metricsService   = "gcprobe-example-operator-metrics"
	metricsReaderSA  = "metrics-reader"
	metricsReaderCRB = "gcprobe-metrics-reader"
)

// TestE2E deploys the operator as the README does, against a real
// kube-apiserver and etcd (envtest): `kubectl apply -k config/default`
// creates the namespace, the ServiceAccounts, the RBAC, the Deployment and
// the metrics Service. envtest runs no kubelet, so the Deployment's pod
// never starts; the test runs the operator in-process instead, with the
// Deployment's args and with a token of the Deployment's ServiceAccount, so
// that every API call it makes (informers, finalizer patches, leader
// election, the metrics server's TokenReviews and SubjectAccessReviews) is
// authorized by config/rbac alone. It then scrapes the secure metrics
// server with `kubectl create token metrics-reader`, as the README does,
// and checks what gcprobe shows of the operator's two planted bugs.
func TestE2E(t *testing.T) {
	defer needEnvtest(t)()

	// The operator, in-process, as the Deployment would run it, but for a
	// short --stuck-after, so that the test need not wait five minutes,
	// and an in-memory span recorder.
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	op := startDeployedOperator(t, func(opts *Options) {
		opts.StuckAfter = 2 * time.Second
		opts.TracerProvider = tp
	})
	defer func() {
		op.stop()
		if err := tp.Shutdown(context.Background()); err != nil {
			t.Errorf("tracer provider: %v", err)
		}
	}()
	ctx, c, admin, addr, logs := op.ctx, op.c, op.admin, op.addr, op.logs

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "operator-e2e-"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}

	transport := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // loopback, self-signed
	defer transport.CloseIdleConnections()
	httpc := &http.Client{Transport: transport, Timeout: 10 * time.Second}
	anon := scraper{base: "https://" + addr, c: httpc}
	// The README's token: metrics-reader, bound to gcprobe-metrics-reader
	// by config/rbac. And one of a ServiceAccount bound to nothing.
	allowed := scraper{base: anon.base, token: kubectlRun(t, admin, "create", "token", metricsReaderSA, "-n", deployNamespace), c: httpc}
	kubectlRun(t, admin, "create", "serviceaccount", "nobody", "-n", ns.Name)
	denied := scraper{base: anon.base, token: kubectlRun(t, admin, "create", "token", "nobody", "-n", ns.Name), c: httpc}

	// (c) The metrics server refuses whoever is not allowed.
	for _, path := range []string{"/metrics", ProfilePath, PagePath, PagePath + "data.json"} {
		for _, tt := range []struct {
			who  string
			s    scraper
			want int
		}{
			{"no token", anon, http.StatusUnauthorized},
			{"a ServiceAccount bound to nothing", denied, http.StatusForbidden},
			{"the metrics-reader ServiceAccount", allowed, http.StatusOK},
		} {
			code, body, err := tt.s.get(path)
			if err != nil || code != tt.want {
				t.Errorf("GET %s with %s: got %d %v (%.200s), want %d", path, tt.who, code, err, body, tt.want)
			}
		}
	}

	// Labelled ConfigMaps get the finalizer; the unlabelled one is left
	// alone.
	mk := func(name string, labelled bool, annotations map[string]string) *corev1.ConfigMap {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: name, Annotations: annotations}}
		if labelled {
			cm.Labels = map[string]string{controller.DemoLabel: "true"}
		}
		if err := c.Create(ctx, cm); err != nil {
			t.Fatalf("creating %s: %v", name, err)
		}
		return cm
	}
	var managed []*corev1.ConfigMap
	for i := range 3 {
		managed = append(managed, mk(fmt.Sprintf("keep-%d", i), true, nil))
	}
	clean := mk("clean", true, nil)
	fail := mk("fail", true, map[string]string{controller.FailDeletionAnnotation: "true"})
	ignored := mk("ignored", false, nil)
	managed = append(managed, clean, fail)
	testkit.PollEvery(t, 30*time.Second, 50*time.Millisecond, "the finalizer on every labelled ConfigMap", func() (bool, string) {
		for _, cm := range managed {
			got := &corev1.ConfigMap{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(cm), got); err != nil || !controllerutil.ContainsFinalizer(got, controller.Finalizer) {
				return false, fmt.Sprintf("%s: %v %v", cm.Name, got.Finalizers, err)
			}
		}
		return true, ""
	})
	if got := (&corev1.ConfigMap{}); c.Get(ctx, client.ObjectKeyFromObject(ignored), got) != nil || len(got.Finalizers) != 0 {
		t.Errorf("the unlabelled ConfigMap got finalizers %v", got.Finalizers)
	}

	// Delete two: one goes, one stays Terminating.
	for _, cm := range []*corev1.ConfigMap{clean, fail} {
		if err := c.Delete(ctx, cm); err != nil {
			t.Fatal(err)
		}
	}
	testkit.PollEvery(t, 30*time.Second, 50*time.Millisecond, "the clean ConfigMap to go", func() (bool, string) {
		err := c.Get(ctx, client.ObjectKeyFromObject(clean), &corev1.ConfigMap{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})

	// (a) Reconcile spans carry the GC work that overlapped them; the
	// failing cleanup's spans carry its error.
	testkit.PollEvery(t, 30*time.Second, 50*time.Millisecond, "reconcile spans with GC attribution, and the failed cleanup's", func() (bool, string) {
		var gc, failed int
		for _, s := range spans.Ended() {
			if s.Name() != "reconcile" {
				continue
			}
			a := attribute.NewSet(s.Attributes()...)
			_, cycles := a.Value("gcprobe.gc.cycles")
			_, alloc := a.Value("gcprobe.heap.allocated_bytes")
			ctl, _ := a.Value("gcprobe.controller.name")
			if cycles && alloc && ctl.AsString() == "configmap" {
				gc++
			}
			if name, _ := a.Value("gcprobe.reconcile.name"); name.AsString() == "fail" && s.Status().Code == codes.Error {
				failed++
			}
		}
		return gc >= len(managed) && failed >= 1, fmt.Sprintf("%d spans with GC attributes, %d failed cleanups", gc, failed)
	})

	// (b) The planted Go finalizer leak, by line, in /metrics and in the
	// profile. Suspects need GC cycles: force them.
	leakLine := testkit.MarkerLine(t, "internal/controller/reconciler.go", "operator-leak")
	site := fmt.Sprintf(`reconciler\.go:%d`, leakLine)
	outstanding := regexp.MustCompile(`gcprobe_finalizers_outstanding\{[^}]*site="[^"]*` + site + `"[^}]*\} ([0-9.e+]+)`)
	suspect := regexp.MustCompile(`gcprobe_finalizers_suspect_objects\{[^}]*site="[^"]*` + site + `"[^}]*\} ([0-9.e+]+)`)
	var metrics string
	testkit.PollEvery(t, 60*time.Second, 50*time.Millisecond, fmt.Sprintf("the leak at reconciler.go:%d to be a suspect in /metrics", leakLine), func() (bool, string) {
		runtime.GC()
		code, body, err := allowed.get("/metrics")
		if err != nil || code != http.StatusOK {
			return false, fmt.Sprint(code, err)
		}
		metrics = string(body)
		return positive(outstanding, metrics) && positive(suspect, metrics), grepLines(metrics, "gcprobe_finalizers_")
	})
	t.Logf("the leak in /metrics:\n%s\n%s", outstanding.FindString(metrics), suspect.FindString(metrics))
	code, body, err := allowed.get(ProfilePath)
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET %s: %d %v", ProfilePath, code, err)
	}
	prof, err := profile.Parse(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parsing the profile: %v", err)
	}
	if err := prof.CheckValid(); err != nil {
		t.Errorf("the profile is invalid: %v", err)
	}
	if !profileHasLeak(prof, "controller.remember", "reconciler.go", leakLine) {
		t.Errorf("the profile has no outstanding sample at controller.remember reconciler.go:%d:\n%s", leakLine, prof)
	}

	// (d) The ConfigMap whose deletion fails is counted as Terminating;
	// the cleanly deleted one was counted out, with its removal time.
	terminating := regexp.MustCompile(`gcprobe_k8s_terminating_objects\{finalizer="example\.gcprobe\.dev/cleanup",group="",kind="ConfigMap",version="v1"\} ([0-9.e+]+)`)
	removals := regexp.MustCompile(`gcprobe_k8s_finalizer_removal_seconds_count\{finalizer="example\.gcprobe\.dev/cleanup",group="",kind="ConfigMap",version="v1"\} ([0-9.e+]+)`)
	testkit.PollEvery(t, 30*time.Second, 50*time.Millisecond, "one terminating ConfigMap and one finalizer removal", func() (bool, string) {
		_, body, err := allowed.get("/metrics")
		if err != nil {
			return false, err.Error()
		}
		m := string(body)
		metrics = m
		return value(terminating, m) == 1 && value(removals, m) == 1, grepLines(m, "gcprobe_k8s_")
	})
	t.Logf("the Kubernetes finalizer backlog in /metrics:\n%s", grepLines(metrics, "gcprobe_k8s_terminating"))
	testkit.PollEvery(t, 30*time.Second, 50*time.Millisecond, "the stuck ConfigMap's log line", func() (bool, string) {
		return strings.Contains(logs.String(), `"namespace":"`+ns.Name+`","name":"fail"`), ""
	})
	got := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(fail), got); err != nil || got.DeletionTimestamp == nil {
		t.Errorf("the failing ConfigMap is not Terminating: %v", err)
	}
}

// deployedOperator is the operator of config/default running in-process
// against envtest: what TestE2E and TestView start.
type deployedOperator struct {
	ctx   context.Context // ends when the operator is stopped
	cfg   *rest.Config    // the control plane's admin
	c     client.Client   // as the admin
	admin kubectl         // kubectl as the admin
	addr  string          // the secure metrics server, on loopback
	logs  *testkit.SyncBuffer
	// stop stops the operator and envtest, and logs what they logged if
	// the test failed.
	stop func()
}

// startDeployedOperator deploys the operator as the README does, against a
// real kube-apiserver and etcd (envtest): `kubectl apply -k config/default`
// creates the namespace, the ServiceAccounts, the RBAC, the Deployment and
// the metrics Service, whose manifests checkManifests checks. envtest runs
// no kubelet, so the Deployment's pod never starts; the operator runs
// in-process instead, with the Deployment's args and with a token of the
// Deployment's ServiceAccount, so that every API call it makes
// (informers, finalizer patches, leader election, the metrics server's
// TokenReviews and SubjectAccessReviews) is authorized by config/rbac
// alone. What differs from the pod: loopback addresses and no health
// server, the Lease's namespace (a pod finds its own), a JSON logger into
// logs, and what tweak changes. It returns once the metrics server
// answers. The caller defers stop, after its goleak check.
func startDeployedOperator(t *testing.T, tweak func(*Options)) *deployedOperator {
	t.Helper()
	ctrlLogs := &testkit.SyncBuffer{}
	ctrl.SetLogger(logr.FromSlogHandler(slog.NewTextHandler(ctrlLogs, nil)))
	env := &envtest.Environment{}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("starting envtest: %v", err)
	}
	stopEnv := func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping envtest: %v", err)
		}
	}
	// Whatever fails below (t.Fatal, here or in checkManifests) stops what
	// was started.
	var op *deployedOperator
	ready := false
	defer func() {
		switch {
		case ready:
		case op != nil:
			op.stop()
		default:
			stopEnv()
		}
	}()
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	admin := env.ControlPlane.KubeCtl()

	// The README's deployment step.
	if _, stderr, err := admin.Run("apply", "-k", "config/default"); err != nil {
		errText, _ := io.ReadAll(stderr)
		t.Fatalf("kubectl apply -k config/default: %v\n%s", err, errText)
	}
	dep := &appsv1.Deployment{}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: deployNamespace, Name: deployName}, dep); err != nil {
		t.Fatalf("the Deployment of config/default: %v", err)
	}
	opts := checkManifests(t, c, admin, dep)

	opCfg := rest.AnonymousClientConfig(cfg)
	stdout, stderr, err := admin.Run("create", "token", dep.Spec.Template.Spec.ServiceAccountName, "-n", dep.Namespace)
	if err != nil {
		errText, _ := io.ReadAll(stderr)
		t.Fatalf("kubectl create token: %v\n%s", err, errText)
	}
	token, _ := io.ReadAll(stdout)
	opCfg.BearerToken = strings.TrimSpace(string(token))
	logs := &testkit.SyncBuffer{}
	addr := freeAddr(t)
	opts.MetricsAddr = addr
	opts.HealthAddr = "0"
	opts.LeaderElectionNamespace = dep.Namespace
	opts.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	// TestE2E and TestView each run the operator, in one test binary.
	opts.skipNameValidation = true
	if tweak != nil {
		tweak(&opts)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, opCfg, opts) }()
	op = &deployedOperator{ctx: ctx, cfg: cfg, c: c, admin: admin, addr: addr, logs: logs}
	op.stop = func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("operator: %v", err)
		}
		if t.Failed() {
			t.Logf("operator log:\n%s\ncontroller-runtime log:\n%s", logs, ctrlLogs)
		}
		stopEnv()
	}

	// The metrics server is up once it answers, whatever it answers.
	transport := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // loopback, self-signed
	defer transport.CloseIdleConnections()
	anon := scraper{base: "https://" + addr, c: &http.Client{Transport: transport, Timeout: 10 * time.Second}}
	testkit.PollEvery(t, 60*time.Second, 50*time.Millisecond, "the metrics server", func() (bool, string) {
		code, _, err := anon.get("/metrics")
		if err == nil {
			return true, ""
		}
		select {
		case runErr := <-done:
			done <- runErr // for stop
			t.Fatalf("the operator stopped before its metrics server answered: %v", runErr)
		default:
		}
		return false, fmt.Sprintf("%d %v", code, err)
	})
	ready = true
	return op
}

// kubectl is envtest's kubectl runner (its type is internal to envtest):
// kubectl with a kubeconfig of the control plane's admin.
type kubectl interface {
	Run(args ...string) (stdout, stderr io.Reader, err error)
}

// kubectlRun runs kubectl with args and returns its standard output,
// trimmed.
func kubectlRun(t *testing.T, k kubectl, args ...string) string {
	t.Helper()
	stdout, stderr, err := k.Run(args...)
	if err != nil {
		errText, _ := io.ReadAll(stderr)
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, errText)
	}
	out, err := io.ReadAll(stdout)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// checkManifests checks what the API server cannot, because no kubelet or
// Prometheus runs here: that the Deployment's args are the operator's
// flags, that its probes and the metrics Service point at the ports those
// flags open, that the Service selects the Deployment's pods, and that the
// optional ServiceMonitor (config/prometheus) selects the Service and
// scrapes its port with a binding to the metrics-reader ClusterRole. It
// returns the options the Deployment's args give.
func checkManifests(t *testing.T, c client.Client, k kubectl, dep *appsv1.Deployment) Options {
	t.Helper()
	ctx := context.Background()
	pod := dep.Spec.Template
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("the Deployment has %d containers, want 1", len(pod.Spec.Containers))
	}
	ctr := pod.Spec.Containers[0]
	var opts Options
	fs := flag.NewFlagSet(ctr.Name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	bindFlags(fs, &opts)
	if err := fs.Parse(ctr.Args); err != nil || fs.NArg() != 0 {
		t.Fatalf("the Deployment's args %q are not the operator's flags: %v", ctr.Args, err)
	}
	if !opts.LeaderElection {
		t.Errorf("the Deployment runs without --leader-elect, yet config/rbac grants a leader election Role")
	}
	if pod.Spec.ServiceAccountName != deployName {
		t.Errorf("the Deployment runs as %q, want the ServiceAccount of config/rbac, %q", pod.Spec.ServiceAccountName, deployName)
	}
	portOf := func(addr string) int32 {
		_, p, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatalf("address %q: %v", addr, err)
		}
		n, err := strconv.Atoi(p)
		if err != nil {
			t.Fatalf("address %q: %v", addr, err)
		}
		return int32(n)
	}
	containerPort := func(name string) int32 {
		for _, p := range ctr.Ports {
			if p.Name == name {
				return p.ContainerPort
			}
		}
		t.Errorf("the container has no port named %q", name)
		return -1
	}
	if got, want := containerPort("https"), portOf(opts.MetricsAddr); got != want {
		t.Errorf("container port https = %d, --metrics-bind-address listens on %d", got, want)
	}
	health := portOf(opts.HealthAddr)
	for what, p := range map[string]*corev1.Probe{"liveness": ctr.LivenessProbe, "readiness": ctr.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil || containerPort(p.HTTPGet.Port.StrVal) != health {
			t.Errorf("the %s probe does not target --health-probe-bind-address (port %d): %+v", what, health, p)
		}
	}

	svc := &corev1.Service{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: dep.Namespace, Name: metricsService}, svc); err != nil {
		t.Fatalf("the metrics Service: %v", err)
	}
	for k, v := range svc.Spec.Selector {
		if pod.Labels[k] != v {
			t.Errorf("the metrics Service selects %s=%s, which the Deployment's pods do not carry (%v)", k, v, pod.Labels)
		}
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.StrVal != "https" {
		t.Fatalf("the metrics Service's ports %+v do not target the container port https", svc.Spec.Ports)
	}

	// The optional ServiceMonitor needs the Prometheus Operator's CRDs, so
	// it is rendered, not applied.
	var monitor struct {
		Kind     string
		Metadata struct{ Namespace string }
		Spec     struct {
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			}
			Endpoints []struct{ Port, Path, Scheme string }
		}
		RoleRef struct{ Name string } `json:"roleRef"`
	}
	var monitors, bindings int
	for doc := range strings.SplitSeq(kubectlRun(t, k, "kustomize", "config/prometheus"), "\n---\n") {
		if err := yaml.Unmarshal([]byte(doc), &monitor); err != nil {
			t.Fatalf("config/prometheus: %v", err)
		}
		switch monitor.Kind {
		case "ServiceMonitor":
			monitors++
			for k, v := range monitor.Spec.Selector.MatchLabels {
				if svc.Labels[k] != v {
					t.Errorf("the ServiceMonitor selects %s=%s, which the metrics Service does not carry (%v)", k, v, svc.Labels)
				}
			}
			if monitor.Metadata.Namespace != svc.Namespace || len(monitor.Spec.Endpoints) != 1 ||
				monitor.Spec.Endpoints[0].Port != svc.Spec.Ports[0].Name || monitor.Spec.Endpoints[0].Path != "/metrics" ||
				monitor.Spec.Endpoints[0].Scheme != "https" {
				t.Errorf("the ServiceMonitor does not scrape https://%s:%s/metrics: %+v", svc.Name, svc.Spec.Ports[0].Name, monitor)
			}
		case "ClusterRoleBinding":
			bindings++
			if monitor.RoleRef.Name != metricsReaderCRB {
				t.Errorf("config/prometheus binds ClusterRole %q, want %q", monitor.RoleRef.Name, metricsReaderCRB)
			}
		}
		monitor.Spec.Selector.MatchLabels, monitor.Spec.Endpoints = nil, nil
	}
	if monitors != 1 || bindings != 1 {
		t.Errorf("config/prometheus has %d ServiceMonitors and %d ClusterRoleBindings, want 1 and 1", monitors, bindings)
	}
	return opts
}

// value returns the first match's value, or -1.
func value(re *regexp.Regexp, metrics string) float64 {
	m := re.FindStringSubmatch(metrics)
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return -1
	}
	return v
}

func positive(re *regexp.Regexp, metrics string) bool { return value(re, metrics) > 0 }

// grepLines returns the non-comment lines that start with prefix.
func grepLines(metrics, prefix string) string {
	var out []string
	for l := range strings.Lines(metrics) {
		if strings.HasPrefix(l, prefix) {
			out = append(out, strings.TrimSpace(l))
		}
	}
	return strings.Join(out, "\n")
}

// profileHasLeak reports whether a sample with outstanding objects has a
// frame of function fn (a suffix of its name) at file:line.
func profileHasLeak(p *profile.Profile, fn, file string, line int) bool {
	idx := -1
	for i, st := range p.SampleType {
		if st.Type == "outstanding" {
			idx = i
		}
	}
	if idx < 0 {
		return false
	}
	for _, s := range p.Sample {
		if s.Value[idx] <= 0 {
			continue
		}
		for _, loc := range s.Location {
			for _, l := range loc.Line {
				if l.Function != nil && strings.HasSuffix(l.Function.Name, fn) &&
					strings.HasSuffix(l.Function.Filename, file) && int(l.Line) == line {
					return true
				}
			}
		}
	}
	return false
}

// needEnvtest skips t unless the envtest control plane is there
// (KUBEBUILDER_ASSETS), and returns the leak check the caller defers:
// everything started after the call must be gone when it runs, but for
// klog's flush daemon (once per process) and the goroutine that
// apimachinery's watch.Filter may leave blocked on a send when a metadata
// informer stops (kubernetes/kubernetes issue 113254).
func needEnvtest(t *testing.T) (verifyNoLeaks func()) {
	t.Helper()
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Skip("KUBEBUILDER_ASSETS is not set: `source scripts/testenv.sh` builds etcd and kube-apiserver and sets it, to run the operator against a real API server")
	}
	opts := []goleak.Option{goleak.IgnoreCurrent(),
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
		goleak.IgnoreTopFunction("k8s.io/apimachinery/pkg/watch.(*filteredWatch).loop")}
	return func() { goleak.VerifyNone(t, opts...) }
}
