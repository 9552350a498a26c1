package main

import (
	"bytes"
	"context"
	"crypto/tls"
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
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/gcprobe/probe/examples/operator/internal/controller"

	"github.com/gcprobe/probe/internal/testkit"
)

// eventually polls cond until it holds or the deadline passes; cond may
// report what it last saw, for the failure message.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s; last seen: %s", timeout, what, last)
		}
		time.Sleep(50 * time.Millisecond) // polling interval, not synchronisation
	}
}

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

// TestE2E runs the operator in-process against a real kube-apiserver and
// etcd (envtest) and checks what gcprobe shows of its two planted bugs,
// through the secure metrics server as a scraper with a ServiceAccount
// token would see it.
func TestE2E(t *testing.T) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Skip("KUBEBUILDER_ASSETS is not set: `source scripts/testenv.sh` builds etcd and kube-apiserver and sets it, to run the operator against a real API server")
	}
	// Everything started after this point must be gone at the end, but
	// for klog's flush daemon (once per process) and the goroutine that
	// apimachinery's watch.Filter may leave blocked on a send when a
	// metadata informer stops (kubernetes/kubernetes issue 113254).
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(),
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
		goleak.IgnoreTopFunction("k8s.io/apimachinery/pkg/watch.(*filteredWatch).loop"))

	ctrlLogs := &testkit.SyncBuffer{}
	ctrl.SetLogger(logr.FromSlogHandler(slog.NewTextHandler(ctrlLogs, nil)))
	env := &envtest.Environment{}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("starting envtest: %v", err)
	}
	defer func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping envtest: %v", err)
		}
	}()
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}

	// The operator, in-process, with an in-memory span recorder.
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	logs := &testkit.SyncBuffer{}
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, cfg, Options{
			MetricsAddr:    addr,
			HealthAddr:     "0",
			StuckAfter:     2 * time.Second,
			TracerProvider: tp,
			Logger:         slog.New(slog.NewJSONHandler(logs, nil)),
		})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("operator: %v", err)
		}
		if err := tp.Shutdown(context.Background()); err != nil {
			t.Errorf("tracer provider: %v", err)
		}
		if t.Failed() {
			t.Logf("operator log:\n%s\ncontroller-runtime log:\n%s", logs, ctrlLogs)
		}
	}()

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "operator-e2e-"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}

	transport := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // loopback, self-signed
	defer transport.CloseIdleConnections()
	httpc := &http.Client{Transport: transport, Timeout: 10 * time.Second}
	anon := scraper{base: "https://" + addr, c: httpc}
	allowed := scraper{base: anon.base, token: serviceAccountToken(t, ctx, c, cs, ns.Name, "scraper", true), c: httpc}
	denied := scraper{base: anon.base, token: serviceAccountToken(t, ctx, c, cs, ns.Name, "nobody", false), c: httpc}

	// (c) The metrics server is up, and refuses whoever is not allowed.
	eventually(t, 60*time.Second, "the metrics server", func() (bool, string) {
		code, _, err := anon.get("/metrics")
		return err == nil, fmt.Sprint(code, err)
	})
	for _, path := range []string{"/metrics", ProfilePath} {
		for _, tt := range []struct {
			who  string
			s    scraper
			want int
		}{
			{"no token", anon, http.StatusUnauthorized},
			{"a ServiceAccount without the ClusterRole", denied, http.StatusForbidden},
			{"a ServiceAccount bound to the ClusterRole", allowed, http.StatusOK},
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
	eventually(t, 30*time.Second, "the finalizer on every labelled ConfigMap", func() (bool, string) {
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
	eventually(t, 30*time.Second, "the clean ConfigMap to go", func() (bool, string) {
		err := c.Get(ctx, client.ObjectKeyFromObject(clean), &corev1.ConfigMap{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})

	// (a) Reconcile spans carry the GC work that overlapped them; the
	// failing cleanup's spans carry its error.
	eventually(t, 30*time.Second, "reconcile spans with GC attribution, and the failed cleanup's", func() (bool, string) {
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
	eventually(t, 60*time.Second, fmt.Sprintf("the leak at reconciler.go:%d to be a suspect in /metrics", leakLine), func() (bool, string) {
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
	eventually(t, 30*time.Second, "one terminating ConfigMap and one finalizer removal", func() (bool, string) {
		_, body, err := allowed.get("/metrics")
		if err != nil {
			return false, err.Error()
		}
		m := string(body)
		metrics = m
		return value(terminating, m) == 1 && value(removals, m) == 1, grepLines(m, "gcprobe_k8s_")
	})
	t.Logf("the Kubernetes finalizer backlog in /metrics:\n%s", grepLines(metrics, "gcprobe_k8s_terminating"))
	eventually(t, 30*time.Second, "the stuck ConfigMap's log line", func() (bool, string) {
		return strings.Contains(logs.String(), `"namespace":"`+ns.Name+`","name":"fail"`), ""
	})
	got := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(fail), got); err != nil || got.DeletionTimestamp == nil {
		t.Errorf("the failing ConfigMap is not Terminating: %v", err)
	}
}

// serviceAccountToken creates a ServiceAccount, binds it to a ClusterRole
// allowing get on the two paths if bind, and returns a token for it from
// the TokenRequest API.
func serviceAccountToken(t *testing.T, ctx context.Context, c client.Client, cs *kubernetes.Clientset, ns, name string, bind bool) string {
	t.Helper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := c.Create(ctx, sa); err != nil {
		t.Fatal(err)
	}
	if bind {
		role := &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: ns + "-metrics-reader"},
			Rules: []rbacv1.PolicyRule{{
				NonResourceURLs: []string{"/metrics", ProfilePath},
				Verbs:           []string{"get"},
			}},
		}
		binding := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: ns + "-metrics-reader"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}},
		}
		for _, o := range []client.Object{role, binding} {
			if err := c.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("requesting a token for %s: %v", name, err)
	}
	return tr.Status.Token
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
