package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The view command: the live page of a probe that sits behind an
// authenticating server (controller-runtime's secure metrics server, with
// filters.WithAuthenticationAndAuthorization), in a browser. A browser
// cannot add a bearer token to its requests, so view runs a reverse proxy
// on loopback that adds one to every request it forwards, and prints the
// local address of the page.
//
// Everything here is the standard library's: the command's module must stay
// light (no client-go), so a kubeconfig's token is read through kubectl.

// viewCommand is the word that selects the command: finalizercheck view ...
const viewCommand = "view"

// viewTokenEnv is the environment variable view reads the token from when
// no token flag is given.
const viewTokenEnv = "GCPROBE_TOKEN"

// Defaults of view's flags.
const (
	viewDefaultListen = "127.0.0.1:0"
	viewDefaultPath   = "/debug/gcprobe/"
)

const viewUsage = `usage: finalizercheck view [-listen 127.0.0.1:0] [-path /debug/gcprobe/]
	[-token-file FILE | -token-file - | -kubeconfig FILE [-context NAME] | -token TOKEN]
	[-ca-file FILE | -insecure-skip-verify] URL

Open the live page of a program whose metrics server asks for a bearer
token (controller-runtime's secure metrics server, with
filters.WithAuthenticationAndAuthorization), in a browser: view serves a
reverse proxy on a loopback port that adds "Authorization: Bearer TOKEN" to
every request it forwards to URL, prints the page's local address on
standard output (http://127.0.0.1:PORT/debug/gcprobe/), and runs until
interrupted. URL is the metrics server's base, e.g. https://127.0.0.1:8443
through kubectl port-forward:

	kubectl -n NS port-forward service/METRICS-SERVICE 8443:8443 &
	kubectl create token SERVICEACCOUNT -n NS | finalizercheck view -token-file - -insecure-skip-verify https://127.0.0.1:8443

The token, from exactly one of:
  -token-file FILE   a file holding it (kubectl create token SA -n NS > FILE)
  -token-file -      standard input
  -kubeconfig FILE   the token of the kubeconfig's current user (or of
                     -context NAME's), read with kubectl config view; a user
                     that logs in with an exec plugin or a client
                     certificate has none: use kubectl create token
  -token TOKEN       on the command line, where ps and the shell's history
                     show it
  $GCPROBE_TOKEN     when no flag above is given
Its identity needs "get" on the paths the page reads: a ClusterRole with
nonResourceURLs ["/metrics", "/debug/gcprobe/*", "/debug/pprof/*"].

The metrics server's certificate is self-signed unless it was given one:
-ca-file FILE verifies it against that CA, -insecure-skip-verify skips the
check. Without either, the system's roots verify it.

Only GET and HEAD are forwarded, from a browser on this machine (the Host
must be a loopback address or localhost); the browser's own Authorization
and cookies are not. A refusal (401, 403, or the 500 that
controller-runtime answers for a token the API server rejects) keeps its
status and says why, on the page and on standard error.

Flags:
`

// viewConfig is what view's command line says.
type viewConfig struct {
	listen string   // the loopback address to serve on
	path   string   // the page's path, printed with the local address
	target *url.URL // the metrics server's base
	token  string
	// tokenFrom names where the token came from, for messages.
	tokenFrom string
	tls       *tls.Config
}

// parseViewArgs parses view's arguments (after the word view). It reads the
// token (from stdin, a file, kubectl or the environment) and the CA file;
// notes go to stderr.
func parseViewArgs(ctx context.Context, args []string, stdin io.Reader, stderr io.Writer) (*viewConfig, error) {
	fs := flag.NewFlagSet("finalizercheck view", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, viewUsage)
		fs.PrintDefaults()
	}
	listen := fs.String("listen", viewDefaultListen, "serve the proxy on this loopback `address`")
	page := fs.String("path", viewDefaultPath, "the page's `path`, printed with the local address")
	tokenFile := fs.String("token-file", "", "read the token from `FILE` (- for standard input)")
	kubeconfig := fs.String("kubeconfig", "", "take the token of the current user of the kubeconfig `FILE` (through kubectl)")
	kubeContext := fs.String("context", "", "with -kubeconfig, the kubeconfig `context` whose user's token to take")
	token := fs.String("token", "", "the `token` itself (ps shows it: prefer -token-file or $"+viewTokenEnv+")")
	caFile := fs.String("ca-file", "", "verify the server's certificate against the PEM `FILE`'s certificates")
	insecure := fs.Bool("insecure-skip-verify", false, "do not verify the server's certificate")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	switch {
	case fs.NArg() == 0:
		return nil, errors.New("no URL: finalizercheck view [flags] URL, where URL is the metrics server's base, e.g. https://127.0.0.1:8443 (view -h for help)")
	case fs.NArg() > 1:
		return nil, fmt.Errorf("one URL, then nothing: got %q (flags go before the URL)", fs.Args())
	}
	c := &viewConfig{listen: *listen, path: *page}
	if err := checkLoopbackListen(c.listen); err != nil {
		return nil, err
	}
	if !strings.HasPrefix(c.path, "/") {
		return nil, fmt.Errorf("-path %q: a path begins with /, e.g. %s", c.path, viewDefaultPath)
	}
	target, err := parseViewURL(fs.Arg(0), c.path)
	if err != nil {
		return nil, err
	}
	c.target = target

	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["context"] && !set["kubeconfig"] {
		return nil, errors.New("-context names a context of the kubeconfig that -kubeconfig FILE gives: give -kubeconfig too")
	}
	if c.tls, err = viewTLS(target, *caFile, set["ca-file"], *insecure, stderr); err != nil {
		return nil, err
	}
	src := tokenSource{
		file: *tokenFile, kubeconfig: *kubeconfig, context: *kubeContext, token: *token,
		fileSet: set["token-file"], kubeconfigSet: set["kubeconfig"], tokenSet: set["token"],
	}
	if c.token, c.tokenFrom, err = src.read(ctx, stdin, stderr); err != nil {
		return nil, err
	}
	return c, nil
}

// checkLoopbackListen refuses a listen address that is not on loopback: the
// proxy adds the token to whatever reaches it, so anyone who could connect
// would act with the token's identity.
func checkLoopbackListen(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("-listen %q: %v (want HOST:PORT on loopback, e.g. %s)", addr, err, viewDefaultListen)
	}
	if !isLoopbackHost(host) {
		what := "not a loopback address"
		if host == "" {
			what = "every interface"
		}
		return fmt.Errorf("-listen %q: %s; view adds your token to every request it forwards, so it listens on loopback only (127.0.0.1, ::1 or localhost, e.g. -listen 127.0.0.1:8080)", addr, what)
	}
	return nil
}

// isLoopbackHost reports whether host (no port) is localhost or a loopback
// IP literal.
func isLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
	return ip != nil && ip.IsLoopback()
}

// parseViewURL checks the metrics server's base URL. A URL that ends in the
// page's path (the page's address pasted whole) is cut back to its base, as
// the proxy appends the browser's path to it.
func parseViewURL(raw, page string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "https" && u.Scheme != "http" || u.Host == "" {
		return nil, fmt.Errorf("URL %q: want the metrics server's base, https://HOST:PORT (e.g. https://127.0.0.1:8443 through kubectl port-forward)", raw)
	}
	if u.Scheme == "http" && !isLoopbackHost(u.Hostname()) {
		return nil, fmt.Errorf("URL %q: plain http would send the token in clear over the network; use https (plain http is accepted to loopback only)", raw)
	}
	if u.User != nil {
		return nil, fmt.Errorf("URL %q: no user information in the URL; the token goes in a header", u.Redacted())
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("URL %q: the base takes no query or fragment", raw)
	}
	if base, ok := strings.CutSuffix(u.Path, strings.TrimSuffix(page, "/")+"/"); ok && page != "/" {
		u.Path = base
	} else if base, ok := strings.CutSuffix(u.Path, strings.TrimSuffix(page, "/")); ok && page != "/" {
		u.Path = base
	}
	u.RawPath = ""
	return u, nil
}

// viewTLS returns the TLS configuration for the metrics server.
func viewTLS(target *url.URL, caFile string, caSet, insecure bool, stderr io.Writer) (*tls.Config, error) {
	if caSet && insecure {
		return nil, errors.New("-ca-file and -insecure-skip-verify: give one (-ca-file verifies the certificate, -insecure-skip-verify does not)")
	}
	if target.Scheme != "https" {
		if caSet || insecure {
			return nil, fmt.Errorf("-ca-file and -insecure-skip-verify are for https, and the URL is %s", target.Redacted())
		}
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	switch {
	case insecure:
		c.InsecureSkipVerify = true //nolint:gosec // asked for on the command line, and said on stderr
		fmt.Fprintf(stderr, "finalizercheck view: -insecure-skip-verify: the certificate of %s is not verified; whoever answers there gets the token\n", target.Host)
	case caSet:
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("-ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("-ca-file %s: no PEM certificate in it", caFile)
		}
		c.RootCAs = pool
	}
	return c, nil
}

// viewMain runs view with args (after the word view) until ctx ends, and
// returns the exit status. The page's local address goes to stdout, notes
// and refusals to stderr.
func viewMain(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c, err := parseViewArgs(ctx, args, stdin, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err == nil {
		err = c.serve(ctx, stdout, stderr)
	}
	if err != nil {
		fmt.Fprintf(stderr, "finalizercheck view: %v\n", err)
		return 1
	}
	return 0
}

// runView is view as the command runs it: until SIGINT or SIGTERM.
func runView(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return viewMain(ctx, args, os.Stdin, stdout, stderr)
}

// serve listens, prints the page's local address, checks the page once
// (what the server says of the token goes to stderr at once, not when the
// browser first asks), and serves until ctx ends.
func (c *viewConfig) serve(ctx context.Context, stdout, stderr io.Writer) error {
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", c.listen)
	if err != nil {
		return fmt.Errorf("-listen %s: %w", c.listen, err)
	}
	p := newViewProxy(c, stderr)
	defer p.transport.CloseIdleConnections()
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()

	local := "http://" + l.Addr().String()
	fmt.Fprintln(stdout, local+c.path)
	fmt.Fprintf(stderr, "finalizercheck view: forwarding %s to %s with the token from %s; interrupt (Ctrl-C) to stop\n", local, c.target.Redacted(), c.tokenFrom)

	checkCtx, cancelCheck := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { p.check(checkCtx, local+c.path) })

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-served:
	}
	cancelCheck()
	wg.Wait()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		// A request still running (a CPU profile's ?seconds=30): cut it.
		srv.Close()
	}
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return serveErr
	}
	return nil
}
