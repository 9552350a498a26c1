package deploy

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// selector is one vector selector of a PromQL expression: the metric name
// and the text between its braces (empty when it has none).
type selector struct {
	Name     string
	Matchers string
}

// Words that look like metric names in PromQL but are not. Aggregations are
// listed because they may be followed by `by (...)` rather than `(`.
var (
	promqlAggregations = wordSet("sum", "min", "max", "avg", "group", "stddev",
		"stdvar", "count", "count_values", "bottomk", "topk", "quantile",
		"limitk", "limit_ratio")
	promqlKeywords = wordSet("and", "or", "unless", "bool", "offset", "atan2",
		"inf", "nan")
	// Keywords followed by a parenthesised list of label names.
	promqlLabelLists = wordSet("by", "without", "on", "ignoring", "group_left",
		"group_right")
)

func wordSet(words ...string) map[string]bool {
	m := make(map[string]bool, len(words))
	for _, w := range words {
		m[w] = true
	}
	return m
}

// selectors returns the vector selectors of a PromQL expression in order.
//
// It is a tokenizer, not a parser: the Prometheus parser is not a
// dependency of this module, and promtool (see promtool_test.go) already
// checks the syntax. Skipping string literals, label lists, ranges, numbers,
// durations, Grafana variables and the names of functions, aggregations and
// keywords leaves exactly the metric names. A selector without a metric name
// ({__name__=~"..."}) is an error: these files name every metric they use so
// that the tests can check it.
func selectors(expr string) ([]selector, error) {
	var out []selector
	s := expr
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '#': // a comment runs to the end of the line
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || c == '`':
			end, err := stringEnd(s, i)
			if err != nil {
				return nil, err
			}
			i = end
		case c == '[': // range or subquery: durations and Grafana variables
			end, err := closing(s, i, '[', ']')
			if err != nil {
				return nil, err
			}
			i = end + 1
		case c == '{':
			return nil, fmt.Errorf("selector without a metric name at offset %d of %q", i, expr)
		case c == '$': // Grafana variable: $name or ${name} or ${name:format}
			i++
			if i < len(s) && s[i] == '{' {
				end := strings.IndexByte(s[i:], '}')
				if end < 0 {
					return nil, fmt.Errorf("unterminated ${ at offset %d of %q", i, expr)
				}
				i += end + 1
				break
			}
			for i < len(s) && isIdentChar(s[i]) {
				i++
			}
		case isDigit(c) || c == '.' && i+1 < len(s) && isDigit(s[i+1]):
			// A number (0.99, 1e3, 0x1f) or a duration (5m, 1h30m): the
			// letters in it are not identifiers.
			for i < len(s) && (isIdentChar(s[i]) || s[i] == '.') {
				i++
			}
		case isIdentStart(c):
			j := i
			for j < len(s) && isIdentChar(s[j]) {
				j++
			}
			word, lower := s[i:j], strings.ToLower(s[i:j])
			next := j
			for next < len(s) && strings.IndexByte(" \t\r\n", s[next]) >= 0 {
				next++
			}
			followedBy := func(b byte) bool { return next < len(s) && s[next] == b }
			switch {
			case promqlLabelLists[lower]:
				i = j
				if followedBy('(') {
					end, err := closing(s, next, '(', ')')
					if err != nil {
						return nil, err
					}
					i = end + 1
				}
			case promqlKeywords[lower], promqlAggregations[lower], followedBy('('):
				i = j // a keyword, an aggregation or a function call
			default:
				sel := selector{Name: word}
				i = j
				if followedBy('{') {
					end, err := closing(s, next, '{', '}')
					if err != nil {
						return nil, err
					}
					sel.Matchers = strings.TrimSpace(s[next+1 : end])
					i = end + 1
				}
				out = append(out, sel)
			}
		default:
			i++
		}
	}
	return out, nil
}

// closing returns the offset of the bracket that closes the one at s[open],
// skipping string literals, which may hold brackets of their own.
func closing(s string, open int, o, c byte) (int, error) {
	depth := 0
	for i := open; i < len(s); {
		switch s[i] {
		case '"', '\'', '`':
			end, err := stringEnd(s, i)
			if err != nil {
				return 0, err
			}
			i = end
			continue
		case o:
			depth++
		case c:
			depth--
			if depth == 0 {
				return i, nil
			}
		}
		i++
	}
	return 0, fmt.Errorf("unbalanced %q at offset %d of %q", o, open, s)
}

// stringEnd returns the offset just past the string literal that starts at
// s[start]. Backquoted strings have no escapes.
func stringEnd(s string, start int) (int, error) {
	quote := s[start]
	for i := start + 1; i < len(s); i++ {
		switch {
		case s[i] == '\\' && quote != '`':
			i++
		case s[i] == quote:
			return i + 1, nil
		}
	}
	return 0, fmt.Errorf("unterminated string at offset %d of %q", start, s)
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func isIdentStart(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '_' || c == ':'
}

func isIdentChar(c byte) bool { return isIdentStart(c) || isDigit(c) }

// metricNamesOf returns the distinct metric names an expression selects.
func metricNamesOf(expr string) ([]string, error) {
	sels, err := selectors(expr)
	if err != nil {
		return nil, err
	}
	var names []string
	seen := map[string]bool{}
	for _, sel := range sels {
		if !seen[sel.Name] {
			seen[sel.Name] = true
			names = append(names, sel.Name)
		}
	}
	return names, nil
}

func TestSelectors(t *testing.T) {
	tests := []struct {
		name    string
		give    string
		want    []selector
		wantErr bool
	}{
		{
			name: "bare metric",
			give: "gcprobe_gc_cpu_fraction",
			want: []selector{{Name: "gcprobe_gc_cpu_fraction"}},
		},
		{
			name: "matchers and range",
			give: `rate(gcprobe_gc_forced_cycles_total{job=~"$job"}[5m]) * 60 >= 5`,
			want: []selector{{Name: "gcprobe_gc_forced_cycles_total", Matchers: `job=~"$job"`}},
		},
		{
			name: "aggregation with by before the argument",
			give: `sum by (kind, site) (rate(gcprobe_finalizers_registered_total[$__rate_interval]))`,
			want: []selector{{Name: "gcprobe_finalizers_registered_total"}},
		},
		{
			name: "aggregation with without after the argument",
			give: `max(gcprobe_finalizer_queue_length) without (instance)`,
			want: []selector{{Name: "gcprobe_finalizer_queue_length"}},
		},
		{
			name: "histogram quantile",
			give: `histogram_quantile(0.99, sum by (le) (rate(gcprobe_gc_pause_seconds_bucket[5m])))`,
			want: []selector{{Name: "gcprobe_gc_pause_seconds_bucket"}},
		},
		{
			name: "binary operators with matching and a bool modifier",
			give: "a > bool 1 and on (kind) group_left (site) b\nunless ignoring(x) c offset 5m",
			want: []selector{{Name: "a"}, {Name: "b"}, {Name: "c"}},
		},
		{
			name: "strings and brackets inside matchers",
			give: `label_replace(gcprobe_finalizers_outstanding{site="f {x} [y] \"z\""}, "dst", "$1", "site", "(.*) .*")`,
			want: []selector{{Name: "gcprobe_finalizers_outstanding", Matchers: `site="f {x} [y] \"z\""`}},
		},
		{
			name: "numbers, durations and special values",
			give: `x > 15 * 60 + 1e-3 + 0x1f - Inf + NaN + .5`,
			want: []selector{{Name: "x"}},
		},
		{
			name: "subquery and grafana variables",
			give: `max_over_time(rate(x[1m])[${__range}:$__interval]) / $scale`,
			want: []selector{{Name: "x"}},
		},
		{
			name: "keywords are case insensitive, comments skipped",
			give: "x AND y # z\nOR w",
			want: []selector{{Name: "x"}, {Name: "y"}, {Name: "w"}},
		},
		{
			name: "recording rule names",
			give: `job:gcprobe_pause:p99`,
			want: []selector{{Name: "job:gcprobe_pause:p99"}},
		},
		{name: "selector without name", give: `{__name__=~"gcprobe_.*"}`, wantErr: true},
		{name: "unbalanced braces", give: `x{job="a"`, wantErr: true},
		{name: "unterminated string", give: `x{job="a}`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := selectors(tt.give)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("selectors(%q) = %v, want an error", tt.give, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("selectors(%q): %v", tt.give, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("selectors(%q)\n got %+v\nwant %+v", tt.give, got, tt.want)
			}
		})
	}
}
