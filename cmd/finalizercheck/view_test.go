package main

import (
	"bytes"
	"context"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer safe for a writer and a reader at once
// (internal/testkit.SyncBuffer's twin: this module requires nothing of the
// root, whose internal packages it would otherwise import).
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// unsetenv unsets key for the test, restoring it after.
func unsetenv(t *testing.T, key string) {
	t.Setenv(key, "")
	os.Unsetenv(key)
}

// fakeOperator stands in for controller-runtime's secure metrics server
// with filters.WithAuthenticationAndAuthorization: no token 401, an
// unknown token 500 "Authentication failed" (a rejected TokenReview), the
// token "denied" 403, the token "good" the page. It records what it was
// sent.
type fakeOperator struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []*http.Request
}

func newFakeOperator(t *testing.T) *fakeOperator {
	f := &fakeOperator{}
	f.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.reqs = append(f.reqs, r.Clone(context.Background()))
		f.mu.Unlock()
		switch r.Header.Get("Authorization") {
		case "":
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		case "Bearer denied":
			http.Error(w, "Authorization denied for user system:serviceaccount:ns:nobody", http.StatusForbidden)
			return
		case "Bearer good":
		default:
			http.Error(w, "Authentication failed", http.StatusInternalServerError)
			return
		}
		switch r.URL.Path {
		case "/debug/gcprobe/":
			fmt.Fprint(w, "<html>the page</html>")
		case "/boom":
			http.Error(w, "the page's own failure", http.StatusInternalServerError)
		default:
			http.NotFound(w, r)
		}
	}))
	// The handshakes that view refuses are the point of some tests.
	f.Config.ErrorLog = log.New(io.Discard, "", 0)
	f.StartTLS()
	t.Cleanup(f.Close)
	return f
}

// last returns the last request the fake operator received.
func (f *fakeOperator) last(t *testing.T) *http.Request {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.reqs) == 0 {
		t.Fatal("the operator received no request")
	}
	return f.reqs[len(f.reqs)-1]
}

// caFile writes the fake operator's certificate as PEM, for -ca-file.
func (f *fakeOperator) caFile(t *testing.T) string {
	name := filepath.Join(t.TempDir(), "ca.pem")
	b := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.Certificate().Raw})
	if err := os.WriteFile(name, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return name
}

// runningView is view running in the test, until stopped.
type runningView struct {
	page   string // the printed local address of the page
	stderr *syncBuffer
	client *http.Client
}

// startView runs view with args until the test ends, and returns it once
// it printed the page's address.
func startView(t *testing.T, stdin io.Reader, args ...string) *runningView {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stdout, stderr := &syncBuffer{}, &syncBuffer{}
	done := make(chan int, 1)
	go func() { done <- viewMain(ctx, args, stdin, stdout, stderr) }()
	transport := &http.Transport{}
	t.Cleanup(func() {
		transport.CloseIdleConnections()
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("view exited with status %d after the interrupt; stderr:\n%s", code, stderr)
		}
	})
	var page string
	poll(t, 10*time.Second, func() error {
		select {
		case code := <-done:
			done <- code
			t.Fatalf("view exited with status %d; stderr:\n%s", code, stderr)
		default:
		}
		page, _, _ = strings.Cut(stdout.String(), "\n")
		if !strings.HasSuffix(stdout.String(), "\n") {
			return fmt.Errorf("view printed no page address yet; stderr:\n%s", stderr)
		}
		return nil
	})
	client := &http.Client{Transport: transport, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &runningView{page: page, stderr: stderr, client: client}
}

// get asks for path through the proxy, with the headers given (name,
// value, ...).
func (v *runningView) get(t *testing.T, method, path string, headers ...string) (int, http.Header, string) {
	t.Helper()
	base := strings.TrimSuffix(v.page, "/debug/gcprobe/")
	req, err := http.NewRequest(method, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i] == "Host" {
			req.Host = headers[i+1]
			continue
		}
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := v.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

func writeToken(t *testing.T, token string) string {
	name := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(name, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	return name
}

// TestViewForwardsWithToken: the page answers through the proxy; the
// operator gets the token, and neither the browser's Authorization nor
// its cookies; the page's address is on stdout and the check's verdict on
// stderr.
func TestViewForwardsWithToken(t *testing.T) {
	unsetenv(t, viewTokenEnv)
	op := newFakeOperator(t)
	v := startView(t, nil, "-token-file", writeToken(t, "good\n"), "-ca-file", op.caFile(t), op.URL)
	if !strings.HasPrefix(v.page, "http://127.0.0.1:") || !strings.HasSuffix(v.page, "/debug/gcprobe/") {
		t.Errorf("printed %q, want http://127.0.0.1:PORT/debug/gcprobe/", v.page)
	}
	poll(t, 10*time.Second, func() error {
		if !strings.Contains(v.stderr.String(), "answered 200 OK for /debug/gcprobe/: open "+v.page) {
			return fmt.Errorf("no verdict of the check on stderr:\n%s", v.stderr)
		}
		return nil
	})

	code, _, body := v.get(t, http.MethodGet, "/debug/gcprobe/",
		"Authorization", "Bearer the-browsers-own", "Cookie", "session=secret", "Proxy-Authorization", "Basic eDp5")
	if code != http.StatusOK || body != "<html>the page</html>" {
		t.Errorf("GET the page: %d %q", code, body)
	}
	got := op.last(t)
	if a := got.Header.Values("Authorization"); len(a) != 1 || a[0] != "Bearer good" {
		t.Errorf("the operator got Authorization %q, want only the token", a)
	}
	for _, h := range []string{"Cookie", "Proxy-Authorization", "X-Forwarded-For"} {
		if v := got.Header.Get(h); v != "" {
			t.Errorf("the operator got %s: %q", h, v)
		}
	}
	if u, _ := strings.CutPrefix(op.URL, "https://"); got.Host != u {
		t.Errorf("the operator got Host %q, want its own, %q", got.Host, u)
	}

	for _, tt := range []struct {
		name    string
		method  string
		path    string
		headers []string
		want    int
		body    string
	}{
		{"another page, as the operator answers", http.MethodGet, "/nothing", nil, http.StatusNotFound, "404 page not found"},
		{"the bare address", http.MethodGet, "/", nil, http.StatusFound, ""},
		{"a name of another site (DNS rebinding)", http.MethodGet, "/debug/gcprobe/", []string{"Host", "evil.example:80"}, http.StatusMisdirectedRequest, "refusing Host"},
		{"localhost", http.MethodGet, "/debug/gcprobe/", []string{"Host", "localhost"}, http.StatusOK, "the page"},
		{"a POST", http.MethodPost, "/debug/gcprobe/", nil, http.StatusMethodNotAllowed, "GET and HEAD only"},
		{"a page's own 500, untouched", http.MethodGet, "/boom", nil, http.StatusInternalServerError, "the page's own failure"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, h, body := v.get(t, tt.method, tt.path, tt.headers...)
			if code != tt.want || !strings.Contains(body, tt.body) {
				t.Errorf("%s %s: %d %q, want %d with %q", tt.method, tt.path, code, body, tt.want, tt.body)
			}
			if code == http.StatusFound && h.Get("Location") != "/debug/gcprobe/" {
				t.Errorf("the bare address redirects to %q", h.Get("Location"))
			}
		})
	}
}

// TestViewRefusals: a refusal keeps its status, and the page and stderr
// say what it means and what to do.
func TestViewRefusals(t *testing.T) {
	unsetenv(t, viewTokenEnv)
	op := newFakeOperator(t)
	for _, tt := range []struct {
		token string
		want  int
		says  []string
	}{
		{"expired", http.StatusInternalServerError, []string{"the operator refused the token", `"Authentication failed"`, "kubectl create token", "The token came from $" + viewTokenEnv}},
		{"denied", http.StatusForbidden, []string{"the operator refused the token", "system:serviceaccount:ns:nobody", `"/debug/gcprobe/*"`, "ClusterRole"}},
	} {
		t.Run(tt.token, func(t *testing.T) {
			t.Setenv(viewTokenEnv, tt.token)
			v := startView(t, nil, "-ca-file", op.caFile(t), op.URL)
			code, h, body := v.get(t, http.MethodGet, "/debug/gcprobe/")
			if code != tt.want || h.Get("Content-Type") != "text/plain; charset=utf-8" {
				t.Errorf("GET the page: %d %s, want %d, text/plain", code, h.Get("Content-Type"), tt.want)
			}
			for _, s := range tt.says {
				if !strings.Contains(body, s) {
					t.Errorf("the page lacks %q:\n%s", s, body)
				}
			}
			poll(t, 10*time.Second, func() error {
				if !strings.Contains(v.stderr.String(), tt.says[0]+": ") {
					return fmt.Errorf("no refusal on stderr:\n%s", v.stderr)
				}
				return nil
			})
			if n := strings.Count(v.stderr.String(), "refused the token"); n != 1 {
				t.Errorf("stderr says the refusal %d times (the check's and the page's are one), want once:\n%s", n, v.stderr)
			}
		})
	}
}

// TestViewTLS: without -ca-file or -insecure-skip-verify, a self-signed
// certificate fails, and the message names both flags; with either, the
// page answers.
func TestViewTLS(t *testing.T) {
	unsetenv(t, viewTokenEnv)
	op := newFakeOperator(t)
	token := writeToken(t, "good")

	v := startView(t, nil, "-token-file", token, op.URL)
	code, _, body := v.get(t, http.MethodGet, "/debug/gcprobe/")
	if code != http.StatusBadGateway {
		t.Errorf("unverifiable certificate: %d, want 502", code)
	}
	for _, out := range []string{body, v.stderr.String()} {
		for _, want := range []string{"could not be verified", "-ca-file FILE", "-insecure-skip-verify"} {
			if !strings.Contains(out, want) {
				t.Errorf("the message lacks %q:\n%s", want, out)
			}
		}
	}

	v = startView(t, nil, "-token-file", token, "-insecure-skip-verify", op.URL)
	if code, _, _ := v.get(t, http.MethodGet, "/debug/gcprobe/"); code != http.StatusOK {
		t.Errorf("-insecure-skip-verify: %d, want 200", code)
	}
	if !strings.Contains(v.stderr.String(), "-insecure-skip-verify: the certificate of") {
		t.Errorf("-insecure-skip-verify is not said on stderr:\n%s", v.stderr)
	}
}

// TestViewConnectionRefused: nothing at URL (no port-forward) is a 502
// that says so.
func TestViewConnectionRefused(t *testing.T) {
	unsetenv(t, viewTokenEnv)
	op := newFakeOperator(t)
	url := op.URL
	op.Close()
	v := startView(t, nil, "-token", "good", "-insecure-skip-verify", url)
	code, _, body := v.get(t, http.MethodGet, "/debug/gcprobe/")
	if code != http.StatusBadGateway || !strings.Contains(body, "nothing answers at") || !strings.Contains(body, "port-forward") {
		t.Errorf("GET through to nothing: %d %q", code, body)
	}
	if !strings.Contains(v.stderr.String(), "-token: the token shows in ps") {
		t.Errorf("-token is not warned about:\n%s", v.stderr)
	}
}

// TestViewArgs: the errors of view's command line, before it listens.
func TestViewArgs(t *testing.T) {
	unsetenv(t, viewTokenEnv)
	token := writeToken(t, "good")
	empty := writeToken(t, " \n")
	for _, tt := range []struct {
		name string
		give []string
		env  string // GCPROBE_TOKEN, "" unset
		err  string
	}{
		{"no URL", []string{"-token-file", token}, "", "no URL"},
		{"two URLs", []string{"-token-file", token, "https://a:1", "https://b:1"}, "", "one URL"},
		{"no token", []string{"https://127.0.0.1:8443"}, "", "no token: give one of -token-file FILE, -token-file - (standard input), -kubeconfig FILE [-context NAME], -token TOKEN, or set $GCPROBE_TOKEN"},
		{"two tokens", []string{"-token-file", token, "-token", "x", "https://127.0.0.1:8443"}, "", "-token-file and -token: give one token source, not 2"},
		{"an empty token", []string{"-token-file", empty, "https://127.0.0.1:8443"}, "", "the token from " + empty + ": empty"},
		{"an empty GCPROBE_TOKEN", []string{"https://127.0.0.1:8443"}, " ", "the token from $GCPROBE_TOKEN: empty"},
		{"a token with a space", []string{"-token", "a b", "https://127.0.0.1:8443"}, "", "spaces or control characters"},
		{"a missing token file", []string{"-token-file", "/nonexistent/token", "https://127.0.0.1:8443"}, "", "no such file"},
		{"-context alone", []string{"-context", "prod", "https://127.0.0.1:8443"}, "", "give -kubeconfig too"},
		{"every interface", []string{"-listen", ":8080", "-token-file", token, "https://127.0.0.1:8443"}, "", "every interface; view adds your token"},
		{"0.0.0.0", []string{"-listen", "0.0.0.0:0", "-token-file", token, "https://127.0.0.1:8443"}, "", "not a loopback address"},
		{"an outside address", []string{"-listen", "192.0.2.1:0", "-token-file", token, "https://127.0.0.1:8443"}, "", "listens on loopback only"},
		{"a host name", []string{"-listen", "example.com:0", "-token-file", token, "https://127.0.0.1:8443"}, "", "not a loopback address"},
		{"no port", []string{"-listen", "127.0.0.1", "-token-file", token, "https://127.0.0.1:8443"}, "", "want HOST:PORT"},
		{"plain http afar", []string{"-token-file", token, "http://metrics.example:8080"}, "", "in clear"},
		{"not a URL", []string{"-token-file", token, "127.0.0.1:8443"}, "", "want the metrics server's base"},
		{"both TLS flags", []string{"-token-file", token, "-ca-file", token, "-insecure-skip-verify", "https://127.0.0.1:8443"}, "", "give one"},
		{"a CA file without a certificate", []string{"-token-file", token, "-ca-file", token, "https://127.0.0.1:8443"}, "", "no PEM certificate"},
		{"a relative -path", []string{"-path", "debug", "-token-file", token, "https://127.0.0.1:8443"}, "", "a path begins with /"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.env != "" {
				t.Setenv(viewTokenEnv, tt.env)
			}
			var stdout, stderr bytes.Buffer
			code := viewMain(context.Background(), tt.give, strings.NewReader(""), &stdout, &stderr)
			if code != 1 || !strings.Contains(stderr.String(), tt.err) || stdout.Len() != 0 {
				t.Errorf("view %q: exit status %d, stdout %q, stderr:\n%s\nwant 1, nothing on stdout, %q on stderr", tt.give, code, stdout.String(), stderr.String(), tt.err)
			}
		})
	}
}

// TestViewTokenSources: each source gives the token, and the flags win
// over $GCPROBE_TOKEN, saying so.
func TestViewTokenSources(t *testing.T) {
	unsetenv(t, viewTokenEnv)
	for _, tt := range []struct {
		name  string
		give  []string
		stdin string
		env   string
		from  string
		note  string // on stderr
	}{
		{"a file", []string{"-token-file", writeToken(t, "tok\n")}, "", "", "", ""},
		{"standard input", []string{"-token-file", "-"}, "tok\n", "", "standard input", ""},
		{"the flag", []string{"-token", "tok"}, "", "", "-token", "the token shows in ps"},
		{"the environment", nil, "", "tok", "$GCPROBE_TOKEN", ""},
		{"a flag over the environment", []string{"-token-file", "-"}, "tok", "other", "standard input", "-token-file given: $GCPROBE_TOKEN is not used"},
		{"a pasted header", []string{"-token-file", "-"}, "Bearer tok", "", "standard input", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.env != "" {
				t.Setenv(viewTokenEnv, tt.env)
			}
			var stderr bytes.Buffer
			c, err := parseViewArgs(context.Background(), append(tt.give, "https://127.0.0.1:8443"), strings.NewReader(tt.stdin), &stderr)
			if err != nil {
				t.Fatal(err)
			}
			if c.token != "tok" || tt.from != "" && c.tokenFrom != tt.from {
				t.Errorf("token %q from %q, want \"tok\" from %q", c.token, c.tokenFrom, tt.from)
			}
			if !strings.Contains(stderr.String(), tt.note) {
				t.Errorf("stderr lacks %q:\n%s", tt.note, stderr.String())
			}
		})
	}
}

// TestViewURL: the base URL, and the page's address pasted whole cut back
// to it.
func TestViewURL(t *testing.T) {
	for _, tt := range []struct{ give, want string }{
		{"https://127.0.0.1:8443", "https://127.0.0.1:8443"},
		{"https://127.0.0.1:8443/", "https://127.0.0.1:8443/"},
		{"https://127.0.0.1:8443/debug/gcprobe/", "https://127.0.0.1:8443"},
		{"https://127.0.0.1:8443/debug/gcprobe", "https://127.0.0.1:8443"},
		{"https://apiserver:6443/api/v1/namespaces/ns/services/https:metrics:8443/proxy", "https://apiserver:6443/api/v1/namespaces/ns/services/https:metrics:8443/proxy"},
		{"http://localhost:8080", "http://localhost:8080"},
	} {
		u, err := parseViewURL(tt.give, viewDefaultPath)
		if err != nil || u.String() != tt.want {
			t.Errorf("parseViewURL(%q) = %v, %v; want %s", tt.give, u, err, tt.want)
		}
	}
}

// fakeKubectl puts a kubectl on PATH (and nothing else) that records its
// arguments and prints out, or fails with out on stderr when fail is set.
// It returns the file of recorded arguments.
func fakeKubectl(t *testing.T, out string, fail bool) string {
	t.Helper()
	dir := t.TempDir()
	args := filepath.Join(dir, "args")
	data := filepath.Join(dir, "out")
	if err := os.WriteFile(data, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	cat, err := exec.LookPath("cat")
	if err != nil {
		t.Skip("skipping: no cat on PATH for the fake kubectl")
	}
	script := fmt.Sprintf("#!/bin/sh\nprintf '%%s\\n' \"$*\" > %q\n%s %q\n", args, cat, data)
	if fail {
		script = fmt.Sprintf("#!/bin/sh\n%s %q >&2\nexit 1\n", cat, data)
	}
	if err := os.WriteFile(filepath.Join(dir, "kubectl"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	return args
}

// TestViewKubeconfig reads the token of a kubeconfig's user through a fake
// kubectl: a token, a tokenFile (relative to the kubeconfig), -context
// passed on, and the users that have none said clearly.
func TestViewKubeconfig(t *testing.T) {
	unsetenv(t, viewTokenEnv)
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "config")
	if err := os.WriteFile(filepath.Join(dir, "sa-token"), []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	view := func(user string) string {
		return `{"kind":"Config","apiVersion":"v1","current-context":"kind-dev","users":[{"name":"dev-user","user":` + user + `}]}`
	}
	for _, tt := range []struct {
		name    string
		out     string
		fail    bool
		context string
		token   string // want, or
		err     string // want in the error
	}{
		{"a token", view(`{"token":"tok"}`), false, "", "tok", ""},
		{"a token of another context", view(`{"token":"tok"}`), false, "prod", "tok", ""},
		{"a tokenFile", view(`{"tokenFile":"sa-token"}`), false, "", "from-file", ""},
		{"an exec plugin", view(`{"exec":{"apiVersion":"client.authentication.k8s.io/v1","command":"gke-gcloud-auth-plugin"}}`), false, "",
			"", "-kubeconfig " + kubeconfig + ": user dev-user of the current context (kind-dev) has no token (it authenticates with an exec plugin"},
		{"a client certificate", view(`{"client-certificate-data":"LS0t","client-key-data":"LS0t"}`), false, "",
			"", "it authenticates with a client certificate): view cannot run its login; get a ServiceAccount's token with `kubectl create token"},
		{"no user", `{"kind":"Config","users":[]}`, false, "prod", "", "context prod has no user"},
		{"kubectl fails", `error: context "nope" does not exist`, true, "nope", "", `context "nope" does not exist`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			args := fakeKubectl(t, tt.out, tt.fail)
			give := []string{"-kubeconfig", kubeconfig}
			if tt.context != "" {
				give = append(give, "-context", tt.context)
			}
			var stderr bytes.Buffer
			c, err := parseViewArgs(context.Background(), append(give, "https://127.0.0.1:8443"), nil, &stderr)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("got %v, want an error with %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.token != tt.token || !strings.Contains(c.tokenFrom, "dev-user") {
				t.Errorf("token %q from %q, want %q from dev-user", c.token, c.tokenFrom, tt.token)
			}
			b, err := os.ReadFile(args)
			if err != nil {
				t.Fatal(err)
			}
			want := "config view --raw --minify -o json --kubeconfig " + kubeconfig
			if tt.context != "" {
				want += " --context " + tt.context
			}
			if got := strings.TrimSpace(string(b)); got != want {
				t.Errorf("kubectl ran with %q, want %q", got, want)
			}
		})
	}

	t.Run("no kubectl", func(t *testing.T) {
		t.Setenv("PATH", t.TempDir())
		_, err := parseViewArgs(context.Background(), []string{"-kubeconfig", kubeconfig, "https://127.0.0.1:8443"}, nil, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "kubectl is not on PATH") || !strings.Contains(err.Error(), "kubectl create token") {
			t.Errorf("got %v, want kubectl not on PATH and the kubectl create token advice", err)
		}
	})
}

// TestViewHelp: view -h prints its usage and exits 0.
func TestViewHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := viewMain(context.Background(), []string{"-h"}, nil, &stdout, &stderr); code != 0 ||
		!strings.Contains(stderr.String(), "usage: finalizercheck view") || !strings.Contains(stderr.String(), "-insecure-skip-verify") {
		t.Errorf("view -h: exit status %d, stderr:\n%s", code, stderr.String())
	}
}
