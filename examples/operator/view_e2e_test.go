package main

import (
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gcprobe/probe/internal/testkit"
)

// TestView opens the operator's live page through `finalizercheck view`, as
// docs/finalizercheck.md tells a person to: the operator of config/default
// runs against envtest behind its secure metrics server; a ServiceAccount
// bound to a ClusterRole with the paths the docs give, and one bound to
// nothing, get tokens from the TokenRequest API; the command, built from
// this repository, proxies the page with each token. With the allowed one
// the page and its data.json answer 200; with the unbound one, and with a
// token the API server rejects, the proxy keeps the operator's status and
// says that the operator refused the token. Each proxy stops on SIGINT,
// with exit status 0.
func TestView(t *testing.T) {
	defer needEnvtest(t)()

	// The command, built once from this checkout (its module is not a
	// requirement of this one), as TestDepsBuild builds it.
	_, bin, _ := buildFinalizercheck(t)

	op := startDeployedOperator(t, nil)
	defer op.stop()
	ctx := op.ctx
	cs, err := kubernetes.NewForConfig(op.cfg)
	if err != nil {
		t.Fatal(err)
	}

	// The RBAC of docs/finalizercheck.md, for a ServiceAccount of its own;
	// and one bound to nothing.
	ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "view-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, sa := range []string{"page-reader", "nobody"} {
		if _, err := cs.CoreV1().ServiceAccounts(ns.Name).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "gcprobe-page-reader-" + ns.Name},
		Rules: []rbacv1.PolicyRule{{
			NonResourceURLs: []string{"/metrics", "/debug/gcprobe/*", "/debug/pprof/*"},
			Verbs:           []string{"get"},
		}},
	}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "page-reader", Namespace: ns.Name}},
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	token := func(sa string) string {
		tr, err := cs.CoreV1().ServiceAccounts(ns.Name).CreateToken(ctx, sa,
			&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: new(int64(600))}},
			metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("TokenRequest for %s: %v", sa, err)
		}
		return tr.Status.Token
	}
	url := "https://" + op.addr

	t.Run("allowed", func(t *testing.T) {
		v := startViewCommand(t, bin, token("page-reader"), url)
		defer v.stop()
		code, body := v.get(t, "/debug/gcprobe/")
		if code != http.StatusOK || !strings.Contains(body, "<title>gcprobe</title>") {
			t.Errorf("GET the page through view: %d %.300s", code, body)
		}
		code, body = v.get(t, "/debug/gcprobe/data.json")
		var data map[string]json.RawMessage
		if err := json.Unmarshal([]byte(body), &data); code != http.StatusOK || err != nil || data["schema"] == nil || data["sites"] == nil {
			t.Errorf("GET data.json through view: %d %v %.300s", code, err, body)
		}
		for _, path := range []string{"/metrics", ProfilePath} {
			if code, body := v.get(t, path); code != http.StatusOK {
				t.Errorf("GET %s through view: %d %.300s", path, code, body)
			}
		}
		testkit.Poll(t, 30*time.Second, "view's check of the page on stderr", func() bool {
			return strings.Contains(v.stderr.String(), "answered 200 OK for /debug/gcprobe/")
		})
	})

	// What the operator answers itself, without the proxy, to a token the
	// API server rejects: controller-runtime's filter gives 500
	// "Authentication failed" (the API server's bearer token authenticator
	// reports a rejected token as an error); the proxy must keep it.
	bad := "not-a-token-of-this-cluster"
	direct, _ := directGet(t, url+"/debug/gcprobe/", bad)
	t.Logf("the operator answers a rejected token with %d", direct)
	for _, tt := range []struct {
		name  string
		token string
		want  int
		says  string
	}{
		{"a ServiceAccount bound to nothing", token("nobody"), http.StatusForbidden, "system:serviceaccount:" + ns.Name + ":nobody"},
		{"a rejected token", bad, direct, "kubectl create token"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.want != http.StatusUnauthorized && tt.want != http.StatusForbidden && tt.want != http.StatusInternalServerError {
				t.Fatalf("the operator answers %d, not a refusal", tt.want)
			}
			v := startViewCommand(t, bin, tt.token, url)
			defer v.stop()
			for _, path := range []string{"/debug/gcprobe/", "/debug/gcprobe/data.json"} {
				code, body := v.get(t, path)
				if code != tt.want || !strings.Contains(body, "the operator refused the token") || !strings.Contains(body, tt.says) {
					t.Errorf("GET %s through view: %d %q, want %d saying the operator refused the token, and %q", path, code, body, tt.want, tt.says)
				}
			}
			testkit.Poll(t, 30*time.Second, "the refusal on view's stderr", func() bool {
				return strings.Contains(v.stderr.String(), "finalizercheck view: the operator refused the token")
			})
		})
	}
}

// viewCommand is a running `finalizercheck view`.
type viewCommand struct {
	cmd    *exec.Cmd
	page   string // the page's local address, as printed
	stderr *testkit.SyncBuffer
	c      *http.Client
	tr     *http.Transport
	done   chan error
	t      *testing.T
}

// startViewCommand runs `finalizercheck view -token-file - -insecure-skip-verify url`
// with token on its standard input (as `kubectl create token ... |` would
// give it; the operator's certificate is self-signed), and returns once
// it printed the page's address. The caller defers stop.
func startViewCommand(t *testing.T, bin, token, url string) *viewCommand {
	t.Helper()
	stdout, stderr := &testkit.SyncBuffer{}, &testkit.SyncBuffer{}
	cmd := exec.Command(bin, "view", "-token-file", "-", "-insecure-skip-verify", url)
	cmd.Stdin = strings.NewReader(token + "\n")
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{}
	v := &viewCommand{cmd: cmd, stderr: stderr, tr: tr, done: make(chan error, 1), t: t,
		c: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
	go func() { v.done <- cmd.Wait() }()
	ok := false
	defer func() {
		if !ok {
			v.stop()
		}
	}()
	testkit.Poll(t, 30*time.Second, "view to print the page's address", func() bool {
		select {
		case err := <-v.done:
			v.done <- err
			t.Fatalf("view exited: %v\n%s", err, stderr)
		default:
		}
		return strings.HasSuffix(stdout.String(), "\n")
	})
	v.page = strings.TrimSpace(stdout.String())
	if !strings.HasPrefix(v.page, "http://127.0.0.1:") || !strings.HasSuffix(v.page, "/debug/gcprobe/") {
		t.Fatalf("view printed %q, want http://127.0.0.1:PORT/debug/gcprobe/", v.page)
	}
	ok = true
	return v
}

// get asks for path through the proxy.
func (v *viewCommand) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := v.c.Get(strings.TrimSuffix(v.page, "/debug/gcprobe/") + path)
	if err != nil {
		t.Fatalf("GET %s through view: %v\nview's stderr:\n%s", path, err, v.stderr)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// stop interrupts view, as Ctrl-C does, and checks that it exits 0.
func (v *viewCommand) stop() {
	v.t.Helper()
	v.tr.CloseIdleConnections()
	if err := v.cmd.Process.Signal(os.Interrupt); err != nil {
		v.t.Errorf("interrupting view: %v", err)
	}
	select {
	case err := <-v.done:
		if err != nil {
			v.t.Errorf("view after SIGINT: %v\n%s", err, v.stderr)
		}
	case <-time.After(15 * time.Second):
		v.cmd.Process.Kill()
		<-v.done
		v.t.Errorf("view did not stop within 15 s of SIGINT\n%s", v.stderr)
	}
	if v.t.Failed() {
		v.t.Logf("view's stderr:\n%s", v.stderr)
	}
}

// directGet asks the operator's metrics server for url with token, without
// view, and returns the status and body.
func directGet(t *testing.T, url, token string) (int, string) {
	t.Helper()
	transport := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // loopback, self-signed
	defer transport.CloseIdleConnections()
	s := scraper{base: url, token: token, c: &http.Client{Transport: transport, Timeout: 30 * time.Second}}
	code, body, err := s.get("")
	if err != nil {
		t.Fatal(err)
	}
	return code, string(body)
}
