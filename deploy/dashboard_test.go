package deploy

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const dashboardPath = "grafana/gcprobe-dashboard.json"

// The dashboard's data source is a template variable, so that it imports
// into any Grafana whatever its Prometheus data source is called.
const datasourceUID = "${datasource}"

// dashboardQuery is one PromQL query of the dashboard and where it is.
type dashboardQuery struct {
	Where string // a JSON path, for messages
	Expr  string
}

func loadDashboard(t *testing.T) map[string]any {
	t.Helper()
	data, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var d map[string]any
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	return d
}

// dashboardQueries returns every "expr" anywhere in the dashboard (panel
// targets, whatever the panel type or nesting) and the PromQL inside the
// query variables' queries.
func dashboardQueries(t *testing.T, d map[string]any) []dashboardQuery {
	t.Helper()
	var qs []dashboardQuery
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for _, k := range slices.Sorted(maps.Keys(v)) {
				if s, ok := v[k].(string); ok && k == "expr" {
					qs = append(qs, dashboardQuery{Where: path + ".expr", Expr: s})
					continue
				}
				walk(path+"."+k, v[k])
			}
		case []any:
			for i, e := range v {
				walk(fmt.Sprintf("%s[%d]", path, i), e)
			}
		}
	}
	walk("$.panels", d["panels"])
	for i, v := range templateVariables(t, d) {
		if v["type"] != "query" {
			continue
		}
		query := v["query"]
		if m, ok := query.(map[string]any); ok { // the newer editor's object form
			query = m["query"]
		}
		s, _ := query.(string)
		if expr := variableQueryExpr(s); expr != "" {
			qs = append(qs, dashboardQuery{Where: fmt.Sprintf("$.templating.list[%d].query", i), Expr: expr})
		}
	}
	if len(qs) == 0 {
		t.Fatalf("%s: no queries found", dashboardPath)
	}
	return qs
}

var (
	labelValuesRE = regexp.MustCompile(`^label_values\((.+),\s*[A-Za-z_][A-Za-z0-9_]*\s*\)$`)
	queryResultRE = regexp.MustCompile(`^query_result\((.+)\)$`)
)

// variableQueryExpr returns the PromQL inside a Grafana Prometheus variable
// query: label_values(expr, label) and query_result(expr) hold one;
// label_values(label), label_names() and metrics(regex) hold none.
func variableQueryExpr(q string) string {
	q = strings.TrimSpace(q)
	if m := labelValuesRE.FindStringSubmatch(q); m != nil {
		return m[1]
	}
	if m := queryResultRE.FindStringSubmatch(q); m != nil {
		return m[1]
	}
	return ""
}

func templateVariables(t *testing.T, d map[string]any) []map[string]any {
	t.Helper()
	templating, _ := d["templating"].(map[string]any)
	list, _ := templating["list"].([]any)
	vars := make([]map[string]any, 0, len(list))
	for _, v := range list {
		m, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("%s: templating.list holds a %T", dashboardPath, v)
		}
		vars = append(vars, m)
	}
	return vars
}

// dashboardPanels returns every panel, those inside collapsed rows included.
func dashboardPanels(t *testing.T, d map[string]any) []map[string]any {
	t.Helper()
	var out []map[string]any
	var add func(list any)
	add = func(list any) {
		panels, _ := list.([]any)
		for _, p := range panels {
			m, ok := p.(map[string]any)
			if !ok {
				t.Fatalf("%s: a panel is a %T", dashboardPath, p)
			}
			out = append(out, m)
			add(m["panels"])
		}
	}
	add(d["panels"])
	if len(out) == 0 {
		t.Fatalf("%s: no panels", dashboardPath)
	}
	return out
}

func TestDashboardMetricsAreExported(t *testing.T) {
	exported := exportedMetricNames()
	used := map[string]bool{}
	for _, q := range dashboardQueries(t, loadDashboard(t)) {
		names, err := metricNamesOf(q.Expr)
		if err != nil {
			t.Errorf("%s: %v", q.Where, err)
			continue
		}
		if len(names) == 0 {
			t.Errorf("%s: query selects no metric: %s", q.Where, q.Expr)
		}
		for _, name := range names {
			used[name] = true
			if !exported[name] {
				t.Errorf("%s: %s is not a metric the probe exports (query %s)", q.Where, name, q.Expr)
			}
		}
	}
	// Not an error: a new metric may well not deserve a panel.
	for _, name := range slices.Sorted(maps.Keys(exported)) {
		if !used[name] {
			t.Logf("exported but on no panel: %s", name)
		}
	}
}

// Every selector is narrowed by the dashboard's job and instance variables,
// or the panels would mix every process the data source scrapes.
func TestDashboardQueriesFilterJobAndInstance(t *testing.T) {
	want := []string{`job=~"$job"`, `instance=~"$instance"`}
	for _, q := range dashboardQueries(t, loadDashboard(t)) {
		if strings.HasPrefix(q.Where, "$.templating") {
			continue // the variables' own queries list the values to pick
		}
		sels, err := selectors(q.Expr)
		if err != nil {
			t.Errorf("%s: %v", q.Where, err)
			continue
		}
		for _, sel := range sels {
			matchers := strings.Join(strings.Fields(sel.Matchers), "")
			for _, w := range want {
				if !strings.Contains(matchers, w) {
					t.Errorf("%s: %s{%s} lacks %s", q.Where, sel.Name, sel.Matchers, w)
				}
			}
		}
	}
}

func TestDashboardShape(t *testing.T) {
	d := loadDashboard(t)
	if v, _ := d["schemaVersion"].(float64); v < 39 {
		t.Errorf("schemaVersion %v, want 39 or later", d["schemaVersion"])
	}
	if uid, _ := d["uid"].(string); uid == "" {
		t.Error("no uid: links to the dashboard would break on every import")
	}
	if d["id"] != nil {
		t.Errorf("id is %v, want null so that importing creates the dashboard", d["id"])
	}

	vars := map[string]map[string]any{}
	for _, v := range templateVariables(t, d) {
		name, _ := v["name"].(string)
		vars[name] = v
	}
	if ds := vars["datasource"]; ds == nil || ds["type"] != "datasource" || ds["query"] != "prometheus" {
		t.Errorf("want a datasource variable of type datasource querying prometheus, got %v", ds)
	}
	for _, name := range []string{"job", "instance"} {
		v := vars[name]
		if v == nil || v["type"] != "query" {
			t.Errorf("want a query variable %q, got %v", name, v)
			continue
		}
		checkDatasource(t, "variable "+name, v["datasource"])
	}

	ids := map[float64]string{}
	var boxes []gridBox
	for _, p := range dashboardPanels(t, d) {
		title, _ := p["title"].(string)
		id, _ := p["id"].(float64)
		if other, dup := ids[id]; dup || id <= 0 {
			t.Errorf("panel %q: id %v is not positive or also used by %q", title, p["id"], other)
		}
		ids[id] = title
		box, err := panelBox(p)
		if err != nil {
			t.Errorf("panel %q: %v", title, err)
		} else {
			for _, b := range boxes {
				if box.overlaps(b) {
					t.Errorf("panel %q overlaps panel %q", title, b.title)
				}
			}
			boxes = append(boxes, box)
		}
		if p["type"] == "row" {
			continue
		}
		if title == "" {
			t.Errorf("panel %v has no title", p["id"])
		}
		if desc, _ := p["description"].(string); desc == "" {
			t.Errorf("panel %q has no description", title)
		}
		checkDatasource(t, "panel "+title, p["datasource"])
		targets, _ := p["targets"].([]any)
		if len(targets) == 0 {
			t.Errorf("panel %q has no targets", title)
		}
		refIDs := map[string]bool{}
		for _, tg := range targets {
			target, _ := tg.(map[string]any)
			ref, _ := target["refId"].(string)
			if ref == "" || refIDs[ref] {
				t.Errorf("panel %q: refId %q is empty or repeated", title, ref)
			}
			refIDs[ref] = true
			if expr, _ := target["expr"].(string); strings.TrimSpace(expr) == "" {
				t.Errorf("panel %q target %s: no expr", title, ref)
			}
			checkDatasource(t, fmt.Sprintf("panel %q target %s", title, ref), target["datasource"])
		}
	}
}

// checkDatasource requires a reference to the ${datasource} variable.
func checkDatasource(t *testing.T, what string, ds any) {
	t.Helper()
	m, _ := ds.(map[string]any)
	if m["type"] != "prometheus" || m["uid"] != datasourceUID {
		t.Errorf("%s: datasource is %v, want {type: prometheus, uid: %s}", what, ds, datasourceUID)
	}
}

// gridBox is where a panel sits on Grafana's 24-column grid.
type gridBox struct {
	title      string
	x, y, w, h float64
}

func panelBox(p map[string]any) (gridBox, error) {
	g, _ := p["gridPos"].(map[string]any)
	num := func(k string) float64 { f, _ := g[k].(float64); return f }
	b := gridBox{title: fmt.Sprint(p["title"]), x: num("x"), y: num("y"), w: num("w"), h: num("h")}
	if g == nil || b.x < 0 || b.y < 0 || b.w <= 0 || b.h <= 0 || b.x+b.w > 24 {
		return b, fmt.Errorf("gridPos %v is off the 24-column grid", p["gridPos"])
	}
	return b, nil
}

func (b gridBox) overlaps(o gridBox) bool {
	return b.x < o.x+o.w && o.x < b.x+b.w && b.y < o.y+o.h && o.y < b.y+b.h
}
