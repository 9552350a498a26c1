package deploy

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	yaml "go.yaml.in/yaml/v3"
	k8syaml "sigs.k8s.io/yaml"
)

const (
	ruleFilePath       = "prometheus/gcprobe.rules.yml"
	prometheusRulePath = "prometheus/prometheusrule.yaml"
	ruleTestsGlob      = "prometheus/tests/*.yml"
	readmePath         = "README.md"
)

var update = flag.Bool("update", false, "rewrite "+prometheusRulePath+" from "+ruleFilePath)

// ruleFile is a Prometheus rule file. Decoding is strict, so a misspelt
// field fails here instead of being ignored.
type ruleFile struct {
	Groups []ruleGroup `yaml:"groups"`
}

type ruleGroup struct {
	Name     string `yaml:"name"`
	Interval string `yaml:"interval"`
	Limit    int    `yaml:"limit"`
	Rules    []rule `yaml:"rules"`
}

type rule struct {
	Alert         string            `yaml:"alert"`
	Record        string            `yaml:"record"`
	Expr          string            `yaml:"expr"`
	For           string            `yaml:"for"`
	KeepFiringFor string            `yaml:"keep_firing_for"`
	Labels        map[string]string `yaml:"labels"`
	Annotations   map[string]string `yaml:"annotations"`
}

// ruleTestFile is a `promtool test rules` file, with every field promtool
// 2.42 reads.
type ruleTestFile struct {
	RuleFiles          []string   `yaml:"rule_files"`
	EvaluationInterval string     `yaml:"evaluation_interval"`
	GroupEvalOrder     []string   `yaml:"group_eval_order"`
	Tests              []ruleTest `yaml:"tests"`
}

type ruleTest struct {
	Name           string            `yaml:"name"`
	Interval       string            `yaml:"interval"`
	ExternalLabels map[string]string `yaml:"external_labels"`
	ExternalURL    string            `yaml:"external_url"`
	InputSeries    []struct {
		Series string `yaml:"series"`
		Values string `yaml:"values"`
	} `yaml:"input_series"`
	AlertRuleTests []struct {
		EvalTime  string `yaml:"eval_time"`
		Alertname string `yaml:"alertname"`
		ExpAlerts []struct {
			ExpLabels      map[string]string `yaml:"exp_labels"`
			ExpAnnotations map[string]string `yaml:"exp_annotations"`
		} `yaml:"exp_alerts"`
	} `yaml:"alert_rule_test"`
	PromQLExprTests []any `yaml:"promql_expr_test"`
}

// decodeStrict decodes one YAML document, rejecting unknown fields.
func decodeStrict(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if err := dec.Decode(new(any)); !errors.Is(err, io.EOF) {
		t.Fatalf("%s: want exactly one YAML document (%v)", path, err)
	}
}

func loadRules(t *testing.T) ruleFile {
	t.Helper()
	var rf ruleFile
	decodeStrict(t, ruleFilePath, &rf)
	if len(rf.Groups) == 0 {
		t.Fatalf("%s: no groups", ruleFilePath)
	}
	return rf
}

func alertRules(t *testing.T) []rule {
	t.Helper()
	var alerts []rule
	for _, g := range loadRules(t).Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				alerts = append(alerts, r)
			}
		}
	}
	return alerts
}

func TestAlertRulesQueryExportedMetrics(t *testing.T) {
	exported := exportedMetricNames()
	for _, g := range loadRules(t).Groups {
		for _, r := range g.Rules {
			names, err := metricNamesOf(r.Expr)
			if err != nil {
				t.Errorf("%s/%s%s: %v", g.Name, r.Alert, r.Record, err)
				continue
			}
			if len(names) == 0 {
				t.Errorf("%s/%s%s: expression selects no metric: %s", g.Name, r.Alert, r.Record, r.Expr)
			}
			for _, name := range names {
				if !exported[name] && !foreignMetricNames()[name] {
					t.Errorf("%s/%s%s: %s is not a metric the probe, controller-runtime or the Go collector exports", g.Name, r.Alert, r.Record, name)
				}
			}
		}
	}
}

var alertNameRE = regexp.MustCompile(`^Gcprobe[A-Z][A-Za-z0-9]*$`)

func TestAlertRulesAreDocumented(t *testing.T) {
	readme, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, r := range alertRules(t) {
		if !alertNameRE.MatchString(r.Alert) {
			t.Errorf("%s: alert names are CamelCase and start with Gcprobe", r.Alert)
		}
		if seen[r.Alert] {
			t.Errorf("%s: defined twice", r.Alert)
		}
		seen[r.Alert] = true
		if s := r.Labels["severity"]; s != "warning" && s != "critical" {
			t.Errorf("%s: severity label is %q, want warning or critical", r.Alert, s)
		}
		for _, key := range []string{"summary", "description"} {
			if strings.TrimSpace(r.Annotations[key]) == "" {
				t.Errorf("%s: no %s annotation", r.Alert, key)
			}
		}
		// The description tells which process to look at.
		if d := r.Annotations["description"]; !strings.Contains(d, "$labels.instance") {
			t.Errorf("%s: description does not name $labels.instance", r.Alert)
		}
		if !bytes.Contains(readme, []byte("### "+r.Alert)) {
			t.Errorf("%s: %s has no \"### %s\" section explaining it", r.Alert, readmePath, r.Alert)
		}
	}
}

// promtool passes a test that expects an alert not to fire even when the
// alert does not exist, so a misspelt alertname would hide a missing test:
// check the names, and that every alert has a test that fires it and one
// that expects silence.
func TestEveryAlertHasFiringAndQuietTests(t *testing.T) {
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, r := range alertRules(t) {
		fires[r.Alert], quiet[r.Alert] = false, false
	}
	paths, err := filepath.Glob(ruleTestsGlob)
	if err != nil || len(paths) == 0 {
		t.Fatalf("no rule tests match %s (%v)", ruleTestsGlob, err)
	}
	for _, path := range paths {
		var tf ruleTestFile
		decodeStrict(t, path, &tf)
		for _, rf := range tf.RuleFiles {
			if got := filepath.Join(filepath.Dir(path), rf); got != filepath.Clean(ruleFilePath) {
				t.Errorf("%s: rule_files has %s, want the path of %s", path, rf, ruleFilePath)
			}
		}
		for _, rt := range tf.Tests {
			if rt.Name == "" {
				t.Errorf("%s: a test has no name", path)
			}
			for _, at := range rt.AlertRuleTests {
				if _, ok := fires[at.Alertname]; !ok {
					t.Errorf("%s: test %q checks alert %q, which %s does not define", path, rt.Name, at.Alertname, ruleFilePath)
					continue
				}
				if len(at.ExpAlerts) > 0 {
					fires[at.Alertname] = true
				} else {
					quiet[at.Alertname] = true
				}
				for _, exp := range at.ExpAlerts {
					// Without exp_annotations promtool skips the templates.
					if len(exp.ExpAnnotations) == 0 {
						t.Errorf("%s: test %q expects %s without exp_annotations", path, rt.Name, at.Alertname)
					}
				}
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(fires)) {
		if !fires[name] {
			t.Errorf("%s: no test in %s makes it fire", name, ruleTestsGlob)
		}
		if !quiet[name] {
			t.Errorf("%s: no test in %s expects it not to fire", name, ruleTestsGlob)
		}
	}
}

// TestPrometheusRuleMatchesRuleFile keeps the PrometheusRule and the plain
// rule file from drifting apart: both are parsed as Kubernetes would (YAML
// to JSON) and the PrometheusRule's spec.groups must equal the file's groups.
// With -update it first regenerates the PrometheusRule from the file.
func TestPrometheusRuleMatchesRuleFile(t *testing.T) {
	plain, err := os.ReadFile(ruleFilePath)
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		rendered, err := renderPrometheusRule(plain)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(prometheusRulePath, rendered, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	wrapped, err := os.ReadFile(prometheusRulePath)
	if err != nil {
		t.Fatal(err)
	}

	var file map[string]any
	if err := k8syaml.UnmarshalStrict(plain, &file); err != nil {
		t.Fatalf("%s: %v", ruleFilePath, err)
	}
	var cr struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name   string            `json:"name"`
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
		Spec map[string]any `json:"spec"`
	}
	if err := k8syaml.UnmarshalStrict(wrapped, &cr); err != nil {
		t.Fatalf("%s: %v", prometheusRulePath, err)
	}
	if cr.APIVersion != "monitoring.coreos.com/v1" || cr.Kind != "PrometheusRule" {
		t.Errorf("%s is %s %s, want monitoring.coreos.com/v1 PrometheusRule", prometheusRulePath, cr.APIVersion, cr.Kind)
	}
	if cr.Metadata.Name == "" {
		t.Errorf("%s has no metadata.name", prometheusRulePath)
	}
	if keys := slices.Sorted(maps.Keys(file)); !slices.Equal(keys, []string{"groups"}) {
		t.Errorf("%s has top-level keys %v, want only groups", ruleFilePath, keys)
	}
	if keys := slices.Sorted(maps.Keys(cr.Spec)); !slices.Equal(keys, []string{"groups"}) {
		t.Errorf("%s has spec keys %v, want only groups", prometheusRulePath, keys)
	}
	if err := sameGroups(file["groups"], cr.Spec["groups"]); err != nil {
		t.Errorf("%s spec.groups differs from %s groups: %v\nregenerate it: go test ./deploy -run %s -update",
			prometheusRulePath, ruleFilePath, err, t.Name())
	}
}

// sameGroups compares two decoded `groups` lists and names the first group
// or rule that differs.
func sameGroups(want, got any) error {
	w, wok := want.([]any)
	g, gok := got.([]any)
	if !wok || !gok {
		return fmt.Errorf("groups are %T and %T, want lists", want, got)
	}
	for i := range max(len(w), len(g)) {
		if i >= len(w) || i >= len(g) {
			return fmt.Errorf("%d groups, want %d", len(g), len(w))
		}
		if reflect.DeepEqual(w[i], g[i]) {
			continue
		}
		wg, _ := w[i].(map[string]any)
		gg, _ := g[i].(map[string]any)
		wr, _ := wg["rules"].([]any)
		gr, _ := gg["rules"].([]any)
		for j := range min(len(wr), len(gr)) {
			if !reflect.DeepEqual(wr[j], gr[j]) {
				return fmt.Errorf("group %d rule %d:\n got %s\nwant %s", i, j, toJSON(gr[j]), toJSON(wr[j]))
			}
		}
		return fmt.Errorf("group %d:\n got %s\nwant %s", i, toJSON(gg), toJSON(wg))
	}
	return nil
}

// toJSON shows a decoded value compactly, with PromQL's < and > as they are.
func toJSON(v any) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Sprint(v)
	}
	return strings.TrimSpace(b.String())
}

// prometheusRuleHeader starts the generated PrometheusRule; the rule file's
// groups follow under spec, indented, comments and all.
const prometheusRuleHeader = `# Code generated from gcprobe.rules.yml by
#	go test ./deploy -run TestPrometheusRuleMatchesRuleFile -update
# DO NOT EDIT: edit gcprobe.rules.yml and regenerate.
#
# gcprobe's alerting rules for the Prometheus Operator. Its Prometheus loads
# the PrometheusRules whose labels match its ruleSelector, in the namespaces
# that match its ruleNamespaceSelector: add the labels your installation
# selects on when you apply it (kube-prometheus-stack, for one, selects
# release: <its Helm release name> by default).
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: gcprobe
  labels:
    app.kubernetes.io/name: gcprobe
    app.kubernetes.io/component: alerting-rules
spec:
`

// renderPrometheusRule wraps a rule file's groups in a PrometheusRule. It
// works on the text rather than re-encoding the YAML so that the rules'
// comments and layout survive: everything from the top-level "groups:" line
// on is indented under spec.
func renderPrometheusRule(rules []byte) ([]byte, error) {
	lines := strings.SplitAfter(string(rules), "\n")
	start := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "groups:") })
	if start < 0 {
		return nil, errors.New("no top-level groups: line")
	}
	var b strings.Builder
	b.WriteString(prometheusRuleHeader)
	for _, l := range lines[start:] {
		if strings.TrimSpace(l) != "" {
			b.WriteString("  ")
		}
		b.WriteString(l)
	}
	return []byte(b.String()), nil
}
