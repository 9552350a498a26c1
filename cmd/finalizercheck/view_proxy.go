package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"syscall"
	"time"
)

// viewProxy forwards the browser's requests to the metrics server with the
// token, and turns a refusal or a failure to connect into a message that
// says what to do, on the page and on standard error.
type viewProxy struct {
	c         *viewConfig
	transport *http.Transport
	rp        *httputil.ReverseProxy
	stderr    io.Writer

	mu   sync.Mutex
	last string // the last message written to stderr: the page polls, say each once
}

func newViewProxy(c *viewConfig, stderr io.Writer) *viewProxy {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = c.tls
	p := &viewProxy{c: c, transport: t, stderr: stderr}
	p.rp = &httputil.ReverseProxy{
		Rewrite:        p.rewrite,
		Transport:      t,
		ModifyResponse: p.modifyResponse,
		ErrorHandler:   p.errorHandler,
	}
	return p
}

// ServeHTTP forwards what a browser on this machine reads. The Host check
// keeps a web page from reaching the proxy under a name of its own that
// resolves to 127.0.0.1 (DNS rebinding), and the method check keeps a
// page's form from posting through it: whatever arrives is sent with the
// token.
func (p *viewProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if !isLoopbackHost(host) {
		http.Error(w, fmt.Sprintf("finalizercheck view: refusing Host %q: open the page at the address view printed (127.0.0.1 or localhost)", r.Host), http.StatusMisdirectedRequest)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "finalizercheck view: forwards GET and HEAD only", http.StatusMethodNotAllowed)
		return
	}
	if r.URL.Path == "/" && p.c.path != "/" {
		// The bare address leads to the page.
		http.Redirect(w, r, p.c.path, http.StatusFound)
		return
	}
	p.rp.ServeHTTP(w, r)
}

// rewrite sends the request to the metrics server with the token, and
// nothing of the browser's own credentials. ReverseProxy has removed the
// hop-by-hop headers and, in Rewrite mode, the X-Forwarded ones.
func (p *viewProxy) rewrite(pr *httputil.ProxyRequest) {
	pr.SetURL(p.c.target)
	for _, h := range []string{"Authorization", "Cookie", "Proxy-Authorization"} {
		pr.Out.Header.Del(h)
	}
	pr.Out.Header.Set("Authorization", "Bearer "+p.c.token)
}

// refusal is controller-runtime's authentication filter's answer, told.
type refusal struct {
	status int
	said   string // the server's own words (its body's first line)
}

// refusalOf recognizes a refusal of the token: 401 and 403 whatever they
// say, and the two 500s of controller-runtime's filter
// (sigs.k8s.io/controller-runtime/pkg/metrics/filters): "Authentication
// failed", which it answers when the TokenReview rejects the token (the API
// server's bearer token authenticator reports a rejected token as an
// error, not as unauthenticated: only a request with no token gets 401),
// and "Authorization for user U failed", when the SubjectAccessReview
// could not be made. Any other 500 is the page's own, passed on as is.
func refusalOf(status int, body []byte) (refusal, bool) {
	said := strings.TrimSpace(string(body))
	if i := strings.IndexByte(said, '\n'); i >= 0 {
		said = said[:i]
	}
	switch {
	case status == http.StatusUnauthorized, status == http.StatusForbidden:
	case status == http.StatusInternalServerError &&
		(said == "Authentication failed" || strings.HasPrefix(said, "Authorization for user ") && strings.HasSuffix(said, " failed")):
	default:
		return refusal{}, false
	}
	return refusal{status: status, said: said}, true
}

// message says what the refusal means and what to do.
func (p *viewProxy) message(r refusal, path string) string {
	head := fmt.Sprintf("the operator refused the token: %s answered %d %s to GET %s (%q).",
		p.c.target.Host, r.status, http.StatusText(r.status), path, r.said)
	var why string
	switch {
	case r.status == http.StatusForbidden:
		why = "The token is valid, but its identity may not get this path. Bind it to a ClusterRole with rules " +
			`[{nonResourceURLs: ["/metrics", "/debug/gcprobe/*", "/debug/pprof/*"], verbs: ["get"]}] ` +
			"(kubectl create clusterrolebinding NAME --clusterrole=ROLE --serviceaccount=NAMESPACE:SERVICEACCOUNT)."
	case r.status == http.StatusInternalServerError && strings.HasPrefix(r.said, "Authorization for user "):
		why = "The operator could not ask the API server whether the token's identity may get this path (a SubjectAccessReview): " +
			"its own ServiceAccount needs \"create\" on subjectaccessreviews (authorization.k8s.io), and the API server must be reachable; its log says which."
	default:
		why = "The API server did not accept the token (controller-runtime's metrics server answers a rejected token with " +
			"500 \"Authentication failed\", and a request without one with 401): it may have expired (kubectl create token " +
			"makes one that lasts an hour unless --duration says otherwise), or belong to another cluster. " +
			"Get a fresh one: kubectl create token SERVICEACCOUNT -n NAMESPACE. " +
			"(A 500 also comes when the operator cannot reach the API server to review the token, or lacks \"create\" on tokenreviews: its log says which.)"
	}
	return head + " " + why + " The token came from " + p.c.tokenFrom + "."
}

// modifyResponse replaces a refusal's body with what it means, keeping its
// status, and says it on stderr.
func (p *viewProxy) modifyResponse(resp *http.Response) error {
	switch resp.StatusCode {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusInternalServerError:
	default:
		return nil
	}
	// The filter's answers are one short line; read a little, and put it
	// back in front of the rest when it is not one of them.
	head, err := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if err != nil {
		return err
	}
	r, ok := refusalOf(resp.StatusCode, head)
	if !ok {
		resp.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(head), resp.Body), resp.Body}
		return nil
	}
	resp.Body.Close()
	msg := p.message(r, resp.Request.URL.Path)
	p.say(msg)
	body := []byte("finalizercheck view: " + msg + "\n")
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	for _, h := range []string{"Content-Encoding", "Content-Length", "ETag", "Last-Modified"} {
		resp.Header.Del(h)
	}
	resp.Header.Set("Content-Type", "text/plain; charset=utf-8")
	resp.Header.Set("X-Content-Type-Options", "nosniff")
	resp.Header.Set("Cache-Control", "no-store")
	return nil
}

// errorHandler answers 502 when the metrics server could not be reached,
// saying why and what to do.
func (p *viewProxy) errorHandler(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		return // the browser went away
	}
	msg := p.connectError(err)
	p.say(msg)
	w.Header().Set("Cache-Control", "no-store")
	http.Error(w, "finalizercheck view: "+msg, http.StatusBadGateway)
}

// connectError says why the metrics server could not be reached.
func (p *viewProxy) connectError(err error) string {
	host := p.c.target.Host
	var (
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		verify   *tls.CertificateVerificationError
	)
	switch {
	case errors.As(err, &unknown), errors.As(err, &hostname), errors.As(err, &invalid), errors.As(err, &verify):
		return fmt.Sprintf("the certificate of %s could not be verified (%v). controller-runtime's metrics server "+
			"makes a self-signed certificate unless given one: give -ca-file FILE with the CA that signed it, "+
			"or -insecure-skip-verify to skip the check (the token then goes to whoever answers at %s).", host, err, host)
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Sprintf("nothing answers at %s (%v): is the operator running, and the port-forward "+
			"(kubectl -n NAMESPACE port-forward service/METRICS-SERVICE 8443:8443)?", host, err)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Sprintf("%s did not answer in time (%v)", host, err)
	}
	if strings.Contains(err.Error(), "server gave HTTP response to HTTPS client") {
		return fmt.Sprintf("%s speaks plain http, not https (%v): give the URL as http://%s, or check the port", host, err, host)
	}
	return fmt.Sprintf("cannot reach %s: %v", host, err)
}

// say writes msg to stderr, unless it was the last thing said: the page
// asks for data.json every few seconds.
func (p *viewProxy) say(msg string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if msg == p.last {
		return
	}
	p.last = msg
	fmt.Fprintf(p.stderr, "finalizercheck view: %s\n", msg)
}

// check asks for the page once through the proxy, so that the token's
// fate is on stderr before the browser opens it: refusals and connection
// errors are said by the proxy itself; success is said here.
func (p *viewProxy) check(ctx context.Context, page string) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, page, nil)
	if err != nil {
		return
	}
	t := &http.Transport{}
	defer t.CloseIdleConnections()
	resp, err := (&http.Client{Transport: t}).Do(req)
	if err != nil {
		return // ctx ended; or the proxy is gone
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	switch {
	case resp.StatusCode == http.StatusOK:
		p.say(fmt.Sprintf("%s answered 200 OK for %s: open %s", p.c.target.Host, p.c.path, page))
	case bytes.HasPrefix(b, []byte("finalizercheck view: ")):
		// A refusal or a connection error, said by the proxy.
	default:
		p.say(fmt.Sprintf("%s answered %s for %s", p.c.target.Host, resp.Status, p.c.path))
	}
}
