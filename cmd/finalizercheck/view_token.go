package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// tokenSource is what view's command line says of the token: exactly one
// of a file, standard input (file "-"), a kubeconfig, the flag itself, or,
// when none is given, $GCPROBE_TOKEN.
type tokenSource struct {
	file, kubeconfig, context, token string
	fileSet, kubeconfigSet, tokenSet bool
}

// createTokenHint says how to get a token a kubeconfig may not have.
const createTokenHint = "get a ServiceAccount's token with `kubectl create token SERVICEACCOUNT -n NAMESPACE > FILE` and give -token-file FILE (or pipe it to -token-file -)"

// maxTokenBytes bounds what is read as a token: a ServiceAccount token is
// about a kilobyte; anything much longer is the wrong file.
const maxTokenBytes = 64 << 10

// read returns the token and where it came from; notes go to stderr.
func (s tokenSource) read(ctx context.Context, stdin io.Reader, stderr io.Writer) (token, from string, err error) {
	var given []string
	if s.fileSet {
		given = append(given, "-token-file")
	}
	if s.kubeconfigSet {
		given = append(given, "-kubeconfig")
	}
	if s.tokenSet {
		given = append(given, "-token")
	}
	env, envSet := os.LookupEnv(viewTokenEnv)
	switch {
	case len(given) > 1:
		return "", "", fmt.Errorf("%s: give one token source, not %d", strings.Join(given, " and "), len(given))
	case len(given) == 0 && !envSet:
		return "", "", fmt.Errorf("no token: give one of -token-file FILE, -token-file - (standard input), -kubeconfig FILE [-context NAME], -token TOKEN, or set $%s; %s", viewTokenEnv, createTokenHint)
	case len(given) == 1 && envSet:
		fmt.Fprintf(stderr, "finalizercheck view: %s given: $%s is not used\n", given[0], viewTokenEnv)
	}
	switch {
	case s.fileSet && s.file == "-":
		from = "standard input"
		token, err = readToken(stdin)
	case s.fileSet:
		from = s.file
		token, err = readTokenFile(s.file)
	case s.kubeconfigSet:
		return kubeconfigToken(ctx, s.kubeconfig, s.context)
	case s.tokenSet:
		from = "-token"
		token = s.token
		fmt.Fprintln(stderr, "finalizercheck view: -token: the token shows in ps and in your shell's history; -token-file or $"+viewTokenEnv+" keep it out of both")
	default:
		from = "$" + viewTokenEnv
		token = env
	}
	if err != nil {
		return "", "", fmt.Errorf("the token from %s: %w", from, err)
	}
	if token, err = checkToken(token); err != nil {
		return "", "", fmt.Errorf("the token from %s: %w", from, err)
	}
	return token, from, nil
}

func readTokenFile(name string) (string, error) {
	f, err := os.Open(name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	return readToken(f)
}

func readToken(r io.Reader) (string, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxTokenBytes+1))
	if err != nil {
		return "", err
	}
	if len(b) > maxTokenBytes {
		return "", fmt.Errorf("longer than %d KiB: not a token", maxTokenBytes>>10)
	}
	return string(b), nil
}

// checkToken trims the token's surrounding space (the newline kubectl
// prints) and refuses what cannot be one: empty, or with spaces or control
// characters inside, which would also break the header it goes in.
func checkToken(t string) (string, error) {
	t = strings.TrimSpace(t)
	t = strings.TrimPrefix(t, "Bearer ")
	if t == "" {
		return "", errors.New("empty; " + createTokenHint)
	}
	for _, r := range t {
		if r <= ' ' || r == 0x7f {
			return "", errors.New("it has spaces or control characters inside: not a bearer token (one line, as `kubectl create token` prints)")
		}
	}
	return t, nil
}

// kubeconfigUser is the part of kubectl config view -o json that view
// reads: the minified config's one user.
type kubeconfigView struct {
	CurrentContext string `json:"current-context"`
	Users          []struct {
		Name string                     `json:"name"`
		User map[string]json.RawMessage `json:"user"`
	} `json:"users"`
}

// kubeconfigToken returns the token of the kubeconfig's current user, or of
// kubeContext's, read with kubectl config view --raw --minify (so that the
// kubeconfig's rules, and KUBECONFIG's merging, are kubectl's own).
func kubeconfigToken(ctx context.Context, kubeconfig, kubeContext string) (token, from string, err error) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		return "", "", fmt.Errorf("-kubeconfig: kubectl is not on PATH, and view reads the kubeconfig's token with it (kubectl config view); %s, on a machine with kubectl", createTokenHint)
	}
	args := []string{"config", "view", "--raw", "--minify", "-o", "json", "--kubeconfig", kubeconfig}
	if kubeContext != "" {
		args = append(args, "--context", kubeContext)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, kubectl, args...)
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	out, err := cmd.Output()
	if err != nil {
		return "", "", fmt.Errorf("-kubeconfig %s: kubectl %s: %v: %s", kubeconfig, strings.Join(args, " "), err, strings.TrimSpace(errOut.String()))
	}
	var v kubeconfigView
	if err := json.Unmarshal(out, &v); err != nil {
		return "", "", fmt.Errorf("-kubeconfig %s: reading kubectl config view's output: %w", kubeconfig, err)
	}
	which := "the current context"
	if kubeContext != "" {
		which = "context " + kubeContext
	} else if v.CurrentContext != "" {
		which = "the current context (" + v.CurrentContext + ")"
	}
	if len(v.Users) == 0 {
		return "", "", fmt.Errorf("-kubeconfig %s: %s has no user; %s", kubeconfig, which, createTokenHint)
	}
	u := v.Users[0]
	from = fmt.Sprintf("user %s of %s in %s", u.Name, which, kubeconfig)
	var s string
	if raw, ok := u.User["token"]; ok && json.Unmarshal(raw, &s) == nil && strings.TrimSpace(s) != "" {
		token, err = checkToken(s)
	} else if raw, ok := u.User["tokenFile"]; ok && json.Unmarshal(raw, &s) == nil && s != "" {
		// kubectl resolves a relative path against the kubeconfig's
		// folder.
		if !filepath.IsAbs(s) {
			s = filepath.Join(filepath.Dir(kubeconfig), s)
		}
		from += " (tokenFile " + s + ")"
		if token, err = readTokenFile(s); err == nil {
			token, err = checkToken(token)
		}
	} else {
		return "", "", fmt.Errorf("-kubeconfig %s: user %s of %s has no token (%s): view cannot run its login; %s",
			kubeconfig, u.Name, which, describeAuth(u.User), createTokenHint)
	}
	if err != nil {
		return "", "", fmt.Errorf("the token of %s: %w", from, err)
	}
	return token, from, nil
}

// describeAuth says how a kubeconfig user without a token authenticates.
func describeAuth(user map[string]json.RawMessage) string {
	var ways []string
	for _, w := range []struct{ key, what string }{
		{"exec", "an exec plugin, which prints short-lived credentials"},
		{"auth-provider", "an auth provider"},
		{"client-certificate", "a client certificate"},
		{"client-certificate-data", "a client certificate"},
		{"username", "a user name and password"},
	} {
		if _, ok := user[w.key]; ok && !slices.Contains(ways, w.what) {
			ways = append(ways, w.what)
		}
	}
	if len(ways) == 0 {
		return "no credentials at all"
	}
	return "it authenticates with " + strings.Join(ways, " and ")
}
