package deploy

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"

	"github.com/google/pprof/profile"
	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"

	"github.com/gcprobe/probe"
	pprofexporter "github.com/gcprobe/probe/exporters/pprof"
)

// The continuous profilers' configs in profilers/ are checked as a
// contract, since neither Alloy nor Parca runs here: each scrapes both of
// the probe's profiles, by the paths pprofexporter exports, with delta on,
// at an interval whose ?seconds the probe's own listener accepts; and a
// running probe serves each configured path with ?seconds=1 as a valid
// profile.

const (
	alloyConfigPath = "profilers/alloy.alloy"
	parcaConfigPath = "profilers/parca.yaml"
	// maxListenerSeconds is the longest delta the probe's own listener
	// takes: below its 30 s write timeout (probe.Handler's doc).
	maxListenerSeconds = 29
)

// wantProfilePaths are the paths every profiler config must scrape.
var wantProfilePaths = []string{pprofexporter.FinalizersPath, pprofexporter.AllocsPath}

// customProfile is a profile a config scrapes from a path of its own.
type customProfile struct {
	name, path     string
	enabled, delta bool
}

func TestAlloyConfig(t *testing.T) {
	src, err := os.ReadFile(alloyConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	file, err := parseAlloy(string(src))
	if err != nil {
		t.Fatalf("%s: %v", alloyConfigPath, err)
	}
	scrapes := file.blocksNamed("pyroscope.scrape")
	if len(scrapes) != 1 {
		t.Fatalf("%s: %d pyroscope.scrape blocks, want 1", alloyConfigPath, len(scrapes))
	}
	scrape := scrapes[0]

	// Targets: an address each, and the service_name Pyroscope groups by.
	targets, _ := scrape.attrs["targets"].([]any)
	if len(targets) == 0 {
		t.Errorf("pyroscope.scrape has no targets")
	}
	for i, tg := range targets {
		obj, _ := tg.(map[string]any)
		if s, _ := obj["__address__"].(string); s == "" {
			t.Errorf("target %d has no __address__", i)
		}
		if s, _ := obj["service_name"].(string); s == "" {
			t.Errorf("target %d has no service_name label: Pyroscope groups profiles by it", i)
		}
	}

	// forward_to names a pyroscope.write of the file, which has an endpoint.
	fwd, _ := scrape.attrs["forward_to"].([]any)
	if len(fwd) != 1 {
		t.Fatalf("forward_to %v, want one receiver", scrape.attrs["forward_to"])
	}
	ref, _ := fwd[0].(alloyRef)
	label, ok := strings.CutPrefix(string(ref), "pyroscope.write.")
	label, ok2 := strings.CutSuffix(label, ".receiver")
	if !ok || !ok2 {
		t.Fatalf("forward_to %v is not a pyroscope.write receiver", fwd[0])
	}
	var writer *alloyBlock
	for _, b := range file.blocksNamed("pyroscope.write") {
		if b.label == label {
			writer = b
		}
	}
	if writer == nil {
		t.Fatalf("forward_to %s: no pyroscope.write %q in the file", ref, label)
	}
	if eps := writer.blocksNamed("endpoint"); len(eps) == 0 || eps[0].attrs["url"] == nil {
		t.Errorf("pyroscope.write %q has no endpoint url", label)
	}

	// The custom profiles: both paths, delta on.
	pcs := scrape.blocksNamed("profiling_config")
	if len(pcs) != 1 {
		t.Fatalf("%d profiling_config blocks, want 1", len(pcs))
	}
	var custom []customProfile
	for _, b := range pcs[0].blocksNamed("profile.custom") {
		path, _ := b.attrs["path"].(string)
		enabled, _ := b.attrs["enabled"].(bool)
		delta, _ := b.attrs["delta"].(bool)
		custom = append(custom, customProfile{b.label, path, enabled, delta})
	}
	checkCustom(t, alloyConfigPath, custom)

	// The delta Alloy asks for: delta_profiling_duration, by default the
	// scrape interval less a second.
	interval := alloyDuration(t, scrape.attrs["scrape_interval"], 15*time.Second)
	seconds := interval - time.Second
	if d, ok := scrape.attrs["delta_profiling_duration"]; ok {
		seconds = alloyDuration(t, d, 0)
	}
	if seconds < time.Second || seconds > maxListenerSeconds*time.Second {
		t.Errorf("Alloy would ask for ?seconds=%v; the probe's listener takes 1 to %d", seconds.Seconds(), maxListenerSeconds)
	}
	servePaths(t, custom)
}

// alloyDuration reads a duration attribute, def if absent.
func alloyDuration(t *testing.T, v any, def time.Duration) time.Duration {
	t.Helper()
	if v == nil {
		return def
	}
	s, _ := v.(string)
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("duration %v: %v", v, err)
	}
	return d
}

func TestParcaConfig(t *testing.T) {
	src, err := os.ReadFile(parcaConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		ObjectStorage yaml.Node `yaml:"object_storage"` // Parca's own, not checked
		ScrapeConfigs []struct {
			JobName        string `yaml:"job_name"`
			ScrapeInterval string `yaml:"scrape_interval"`
			StaticConfigs  []struct {
				Targets []string          `yaml:"targets"`
				Labels  map[string]string `yaml:"labels"`
			} `yaml:"static_configs"`
			ProfilingConfig struct {
				PprofConfig map[string]struct {
					Enabled *bool  `yaml:"enabled"`
					Path    string `yaml:"path"`
					Delta   bool   `yaml:"delta"`
				} `yaml:"pprof_config"`
			} `yaml:"profiling_config"`
		} `yaml:"scrape_configs"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(src))
	dec.KnownFields(true) // a misspelt key fails here rather than in Parca
	if err := dec.Decode(&cfg); err != nil {
		t.Fatalf("%s: %v", parcaConfigPath, err)
	}
	if len(cfg.ScrapeConfigs) != 1 {
		t.Fatalf("%d scrape_configs, want 1", len(cfg.ScrapeConfigs))
	}
	sc := cfg.ScrapeConfigs[0]
	if sc.JobName == "" || len(sc.StaticConfigs) == 0 || len(sc.StaticConfigs[0].Targets) == 0 {
		t.Errorf("scrape config without a job name or a target: %+v", sc)
	}
	var custom []customProfile
	for name, pc := range sc.ProfilingConfig.PprofConfig {
		if pc.Path == "" {
			continue // a standard profile, by Parca's own path
		}
		custom = append(custom, customProfile{name, pc.Path, pc.Enabled == nil || *pc.Enabled, pc.Delta})
	}
	checkCustom(t, parcaConfigPath, custom)
	// Parca asks a delta path for ?seconds= its scrape interval.
	interval, err := time.ParseDuration(sc.ScrapeInterval)
	if err != nil {
		t.Fatalf("scrape_interval %q: %v", sc.ScrapeInterval, err)
	}
	if interval < time.Second || interval > maxListenerSeconds*time.Second {
		t.Errorf("Parca would ask for ?seconds=%v; the probe's listener takes 1 to %d", interval.Seconds(), maxListenerSeconds)
	}
	servePaths(t, custom)
}

// checkCustom checks that custom holds each of wantProfilePaths once,
// enabled, with delta on, and nothing else.
func checkCustom(t *testing.T, file string, custom []customProfile) {
	t.Helper()
	var paths []string
	for _, c := range custom {
		paths = append(paths, c.path)
		if !c.enabled || !c.delta {
			t.Errorf("%s: profile %s (%s): enabled %v, delta %v; want both on", file, c.name, c.path, c.enabled, c.delta)
		}
	}
	slices.Sort(paths)
	want := slices.Clone(wantProfilePaths)
	slices.Sort(want)
	if !slices.Equal(paths, want) {
		t.Errorf("%s scrapes the custom paths %q, want %q (pprofexporter.FinalizersPath and AllocsPath)", file, paths, want)
	}
}

// servePaths asks a running probe's own listener for each path of custom
// with ?seconds=1, as a profiler with delta on would, and checks that a
// valid one-second profile comes back.
func servePaths(t *testing.T, custom []customProfile) {
	t.Helper()
	p, err := probe.Start(probe.WithRegisterer(prometheus.NewRegistry()), probe.WithListenAddr("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	var wg sync.WaitGroup
	for _, c := range custom {
		wg.Go(func() {
			url := "http://" + p.Addr().String() + c.path + "?" + pprofexporter.DeltaParam + "=1"
			res, err := http.Get(url)
			if err != nil {
				t.Error(err)
				return
			}
			defer res.Body.Close()
			body, err := io.ReadAll(res.Body)
			if err != nil || res.StatusCode != http.StatusOK {
				t.Errorf("GET %s: %d %v %s", url, res.StatusCode, err, body)
				return
			}
			prof, err := profile.Parse(bytes.NewReader(body))
			if err != nil {
				t.Errorf("GET %s: %v", url, err)
				return
			}
			if err := prof.CheckValid(); err != nil || prof.DurationNanos != time.Second.Nanoseconds() {
				t.Errorf("GET %s: valid %v, duration %d ns, want 1 s", url, err, prof.DurationNanos)
			}
		})
	}
	wg.Wait()
	http.DefaultClient.CloseIdleConnections()
}

// A small reader of the Alloy configuration syntax, enough for the
// config here: blocks (name, optional label, body), attributes, and the
// values strings, numbers, booleans, null, lists, objects, references
// and calls. Comments are // and /* */.

type alloyBlock struct {
	name, label string
	attrs       map[string]any
	blocks      []*alloyBlock
}

// alloyRef is a reference to another component's export
// (pyroscope.write.backend.receiver).
type alloyRef string

func (b *alloyBlock) blocksNamed(name string) []*alloyBlock {
	var out []*alloyBlock
	for _, c := range b.blocks {
		if c.name == name {
			out = append(out, c)
		}
	}
	return out
}

type alloyToken struct {
	kind byte // 'i' identifier, 's' string, 'n' number, or the punctuation itself
	text string
	line int
}

func lexAlloy(src string) ([]alloyToken, error) {
	var toks []alloyToken
	line := 1
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == '\n':
			line++
			i++
		case c == ' ' || c == '\t' || c == '\r':
			i++
		case strings.HasPrefix(src[i:], "//"):
			for i < len(src) && src[i] != '\n' {
				i++
			}
		case strings.HasPrefix(src[i:], "/*"):
			end := strings.Index(src[i+2:], "*/")
			if end < 0 {
				return nil, fmt.Errorf("line %d: unterminated comment", line)
			}
			line += strings.Count(src[i:i+2+end], "\n")
			i += end + 4
		case c == '"':
			j := i + 1
			for j < len(src) && src[j] != '"' {
				if src[j] == '\\' {
					j++
				}
				if j < len(src) && src[j] == '\n' {
					return nil, fmt.Errorf("line %d: newline in a string", line)
				}
				j++
			}
			if j >= len(src) {
				return nil, fmt.Errorf("line %d: unterminated string", line)
			}
			s, err := strconv.Unquote(src[i : j+1])
			if err != nil {
				return nil, fmt.Errorf("line %d: %v", line, err)
			}
			toks = append(toks, alloyToken{'s', s, line})
			i = j + 1
		case strings.ContainsRune("{}[]()=,", rune(c)):
			toks = append(toks, alloyToken{c, string(c), line})
			i++
		case unicode.IsLetter(rune(c)) || c == '_':
			j := i
			for j < len(src) && (unicode.IsLetter(rune(src[j])) || unicode.IsDigit(rune(src[j])) || src[j] == '_' || src[j] == '.') {
				j++
			}
			toks = append(toks, alloyToken{'i', src[i:j], line})
			i = j
		case unicode.IsDigit(rune(c)) || c == '-':
			j := i + 1
			for j < len(src) && (unicode.IsDigit(rune(src[j])) || src[j] == '.') {
				j++
			}
			toks = append(toks, alloyToken{'n', src[i:j], line})
			i = j
		default:
			return nil, fmt.Errorf("line %d: unexpected %q", line, c)
		}
	}
	return toks, nil
}

type alloyParser struct {
	toks []alloyToken
	pos  int
}

func parseAlloy(src string) (*alloyBlock, error) {
	toks, err := lexAlloy(src)
	if err != nil {
		return nil, err
	}
	p := &alloyParser{toks: toks}
	file := &alloyBlock{attrs: map[string]any{}}
	if err := p.body(file, true); err != nil {
		return nil, err
	}
	return file, nil
}

func (p *alloyParser) peek() alloyToken {
	if p.pos < len(p.toks) {
		return p.toks[p.pos]
	}
	return alloyToken{kind: 0, text: "end of file"}
}

func (p *alloyParser) next() alloyToken { t := p.peek(); p.pos++; return t }

func (p *alloyParser) expect(kind byte) (alloyToken, error) {
	t := p.next()
	if t.kind != kind {
		return t, fmt.Errorf("line %d: want %q, got %q", t.line, kind, t.text)
	}
	return t, nil
}

// body reads statements into b until '}' (or the end, at top level).
func (p *alloyParser) body(b *alloyBlock, top bool) error {
	for {
		t := p.peek()
		if t.kind == 0 && top {
			return nil
		}
		if t.kind == '}' && !top {
			p.next()
			return nil
		}
		name, err := p.expect('i')
		if err != nil {
			return err
		}
		switch t := p.next(); t.kind {
		case '=':
			if _, dup := b.attrs[name.text]; dup {
				return fmt.Errorf("line %d: attribute %s set twice", name.line, name.text)
			}
			v, err := p.value()
			if err != nil {
				return err
			}
			b.attrs[name.text] = v
		case 's', '{':
			child := &alloyBlock{name: name.text, attrs: map[string]any{}}
			if t.kind == 's' {
				child.label = t.text
				if _, err := p.expect('{'); err != nil {
					return err
				}
			}
			if err := p.body(child, false); err != nil {
				return err
			}
			b.blocks = append(b.blocks, child)
		default:
			return fmt.Errorf("line %d: after %s, want = or a block, got %q", t.line, name.text, t.text)
		}
	}
}

func (p *alloyParser) value() (any, error) {
	t := p.next()
	switch t.kind {
	case 's':
		return t.text, nil
	case 'n':
		return strconv.ParseFloat(t.text, 64)
	case 'i':
		switch t.text {
		case "true", "false":
			return t.text == "true", nil
		case "null":
			return nil, nil
		}
		if p.peek().kind == '(' { // a call: its arguments, unevaluated
			p.next()
			_, err := p.list(')')
			return alloyRef(t.text + "()"), err
		}
		return alloyRef(t.text), nil
	case '[':
		return p.list(']')
	case '{':
		obj := map[string]any{}
		for p.peek().kind != '}' {
			k := p.next()
			if k.kind != 's' && k.kind != 'i' {
				return nil, fmt.Errorf("line %d: want an object key, got %q", k.line, k.text)
			}
			if _, err := p.expect('='); err != nil {
				return nil, err
			}
			v, err := p.value()
			if err != nil {
				return nil, err
			}
			obj[k.text] = v
			if p.peek().kind == ',' {
				p.next()
			}
		}
		p.next()
		return obj, nil
	}
	return nil, fmt.Errorf("line %d: want a value, got %q", t.line, t.text)
}

// list reads values separated by commas up to end.
func (p *alloyParser) list(end byte) ([]any, error) {
	var out []any
	for p.peek().kind != end {
		if p.peek().kind == 0 {
			return nil, fmt.Errorf("unterminated list")
		}
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		out = append(out, v)
		if p.peek().kind == ',' {
			p.next()
		} else if p.peek().kind != end {
			t := p.peek()
			return nil, fmt.Errorf("line %d: want , or %q, got %q", t.line, end, t.text)
		}
	}
	p.next()
	return out, nil
}

func TestAlloyReader(t *testing.T) {
	tests := []struct {
		name, give string
		wantErr    bool
	}{
		{name: "block", give: `a.b "x" { k = "v" }`},
		{name: "nested and values", give: "a { b { c = [1, true, null, {\"k\" = x.y}, f(\"e\")] } /* c */ }\n// end"},
		{name: "unterminated block", give: `a { k = 1`, wantErr: true},
		{name: "twice", give: `a { k = 1 k = 2 }`, wantErr: true},
		{name: "no value", give: `a { k = }`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseAlloy(tt.give)
			if (err != nil) != tt.wantErr {
				t.Fatalf("parseAlloy(%q): %v, want error %v", tt.give, err, tt.wantErr)
			}
		})
	}
}
