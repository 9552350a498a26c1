package deploy

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	k8syaml "sigs.k8s.io/yaml"
)

// promtool returns the promtool to run: $GCPROBE_PROMTOOL, which
// scripts/testenv.sh exports, else the one on PATH. It skips the test when
// there is none. A GCPROBE_PROMTOOL that does not run is a broken setup, not
// a reason to skip: CI sets it so that these tests never skip there.
func promtool(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("GCPROBE_PROMTOOL"); p != "" {
		path, err := exec.LookPath(p)
		if err != nil {
			t.Fatalf("GCPROBE_PROMTOOL=%s: %v", p, err)
		}
		return path
	}
	if path, err := exec.LookPath("promtool"); err == nil {
		return path
	}
	t.Skip("promtool not found: run `source scripts/testenv.sh` (installs Debian's prometheus package)")
	return ""
}

// runPromtool runs promtool with args and fails the test with its output if
// it exits non-zero.
func runPromtool(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), promtool(t), args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
}

func TestPromtoolCheckRules(t *testing.T) {
	t.Run("rule file", func(t *testing.T) {
		runPromtool(t, "check", "rules", ruleFilePath)
	})
	// The PrometheusRule's groups, taken out of it, must load as well (the
	// parity test checks they equal the rule file's; this one does not rely
	// on it).
	t.Run("PrometheusRule spec", func(t *testing.T) {
		data, err := os.ReadFile(prometheusRulePath)
		if err != nil {
			t.Fatal(err)
		}
		var cr struct {
			Spec any `json:"spec"`
		}
		if err := k8syaml.Unmarshal(data, &cr); err != nil {
			t.Fatalf("%s: %v", prometheusRulePath, err)
		}
		path := writeYAML(t, "prometheusrule-spec.rules.yml", cr.Spec)
		runPromtool(t, "check", "rules", path)
	})
}

func TestPromtoolTestRules(t *testing.T) {
	paths, err := filepath.Glob(ruleTestsGlob)
	if err != nil || len(paths) == 0 {
		t.Fatalf("no rule tests match %s (%v)", ruleTestsGlob, err)
	}
	runPromtool(t, append([]string{"test", "rules"}, paths...)...)
}

// grafanaVarRE matches a Grafana variable: $name, ${name} or ${name:format}.
var grafanaVarRE = regexp.MustCompile(`\$\{?(\w+)(?::\w+)?\}?`)

// TestPromtoolCheckDashboardQueries checks the PromQL syntax of every
// dashboard query: each becomes a recording rule, with Grafana's variables
// replaced by values Prometheus accepts, and promtool loads the lot.
func TestPromtoolCheckDashboardQueries(t *testing.T) {
	promtool(t) // skip before doing any work
	durations := map[string]string{
		"__rate_interval": "5m",
		"__interval":      "1m",
		"__range":         "1h",
	}
	type recording struct {
		Record string `json:"record"`
		Expr   string `json:"expr"`
	}
	var rules []recording
	for i, q := range dashboardQueries(t, loadDashboard(t)) {
		expr := grafanaVarRE.ReplaceAllStringFunc(q.Expr, func(v string) string {
			name := grafanaVarRE.FindStringSubmatch(v)[1]
			if d, ok := durations[name]; ok {
				return d
			}
			return ".*" // $job, $instance: used in regexp matchers
		})
		rules = append(rules, recording{Record: fmt.Sprintf("gcprobe_dashboard:query_%d", i), Expr: expr})
		t.Logf("query_%d = %s: %s", i, q.Where, expr)
	}
	path := writeYAML(t, "dashboard.rules.yml", map[string]any{
		"groups": []any{map[string]any{"name": "dashboard", "rules": rules}},
	})
	runPromtool(t, "check", "rules", path)
}

// writeYAML writes v as YAML into the test's temporary directory.
func writeYAML(t *testing.T, name string, v any) string {
	t.Helper()
	data, err := k8syaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
