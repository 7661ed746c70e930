package deploy_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"text/template"

	"sigs.k8s.io/yaml"
)

// A faithful minimal Helm renderer, for tests: Debian has no helm, and the
// Helm Go SDK as a test dependency costs ~240 MB of modules and ~5 minutes
// of a cold build (measured, see the report) for what the chart needs: Go
// text/template over the chart's templates with Helm's data (.Values merged
// over values.yaml, .Release, .Chart, .Files, .Template, .Capabilities) and
// the handful of Sprig/Helm functions the chart uses, implemented with Helm's
// semantics. A template calling any other function fails to parse, so the
// chart cannot drift outside what is checked here.

type chartMeta struct {
	APIVersion  string `json:"apiVersion"`
	Name        string `json:"name"`
	Version     string `json:"version"`
	AppVersion  string `json:"appVersion"`
	KubeVersion string `json:"kubeVersion"`
}

// helmFiles is .Files: the chart's non-template files.
type helmFiles struct{ dir string }

// Get returns a file's content, "" when absent (as Helm does).
func (f helmFiles) Get(name string) string {
	b, err := os.ReadFile(filepath.Join(f.dir, filepath.FromSlash(name)))
	if err != nil {
		return ""
	}
	return string(b)
}

// mergeValues deep-merges src over dst (Helm's coalescing of user values over
// the chart's defaults): maps merge, anything else replaces, null deletes.
func mergeValues(dst, src map[string]any) map[string]any {
	out := maps.Clone(dst)
	if out == nil {
		out = map[string]any{}
	}
	for k, v := range src {
		if v == nil {
			delete(out, k)
			continue
		}
		if sm, ok := v.(map[string]any); ok {
			if dm, ok := out[k].(map[string]any); ok {
				out[k] = mergeValues(dm, sm)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// empty is Sprig's notion of an empty value (for default).
func empty(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.String, reflect.Slice, reflect.Map, reflect.Array:
		return rv.Len() == 0
	case reflect.Bool:
		return !rv.Bool()
	case reflect.Int, reflect.Int64, reflect.Int32:
		return rv.Int() == 0
	case reflect.Float64, reflect.Float32:
		return rv.Float() == 0
	case reflect.Ptr, reflect.Interface:
		return rv.IsNil()
	}
	return false
}

// toYAML is Helm's toYaml: sigs.k8s.io/yaml, trailing newline trimmed.
func toYAML(v any) string {
	b, err := yaml.Marshal(v)
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(string(b), "\n")
}

func indent(n int, s string) string {
	pad := strings.Repeat(" ", n)
	return pad + strings.ReplaceAll(s, "\n", "\n"+pad)
}

func toInt(v any) int {
	switch x := v.(type) {
	case int:
		return x
	case int64:
		return int(x)
	case float64:
		return int(x)
	case string:
		var n int
		fmt.Sscan(x, &n)
		return n
	}
	return 0
}

// renderChart renders every manifest template of the chart in dir with
// values overrides, as `helm template RELEASE dir -n NAMESPACE -f overrides`.
// It returns the rendered documents by template file.
func renderChart(dir, release, namespace string, overrides map[string]any) (map[string]string, error) {
	var meta chartMeta
	b, err := os.ReadFile(filepath.Join(dir, "Chart.yaml"))
	if err != nil {
		return nil, err
	}
	if err := yaml.Unmarshal(b, &meta); err != nil {
		return nil, fmt.Errorf("Chart.yaml: %w", err)
	}
	if meta.APIVersion != "v2" || meta.Name == "" || meta.Version == "" {
		return nil, fmt.Errorf("Chart.yaml: apiVersion v2, name and version are required: %+v", meta)
	}
	var values map[string]any
	b, err = os.ReadFile(filepath.Join(dir, "values.yaml"))
	if err != nil {
		return nil, err
	}
	if err := yaml.Unmarshal(b, &values); err != nil {
		return nil, fmt.Errorf("values.yaml: %w", err)
	}
	values = mergeValues(values, overrides)

	root := template.New("chart").Option("missingkey=zero")
	funcs := template.FuncMap{
		"include": func(name string, data any) (string, error) {
			var buf bytes.Buffer
			if err := root.ExecuteTemplate(&buf, name, data); err != nil {
				return "", err
			}
			return buf.String(), nil
		},
		"toYaml":  toYAML,
		"nindent": func(n int, s string) string { return "\n" + indent(n, s) },
		"indent":  indent,
		"quote": func(args ...any) string {
			out := make([]string, 0, len(args))
			for _, a := range args {
				if a != nil {
					out = append(out, fmt.Sprintf("%q", fmt.Sprint(a)))
				}
			}
			return strings.Join(out, " ")
		},
		"default": func(d any, given ...any) any {
			if len(given) == 0 || empty(given[0]) {
				return d
			}
			return given[0]
		},
		"required": func(msg string, v any) (any, error) {
			if v == nil || (reflect.ValueOf(v).Kind() == reflect.String && v.(string) == "") {
				return nil, fmt.Errorf("%s", msg)
			}
			return v, nil
		},
		"trunc": func(n int, s string) string {
			if n >= 0 && len(s) > n {
				return s[:n]
			}
			return s
		},
		"trimSuffix": func(suffix, s string) string { return strings.TrimSuffix(s, suffix) },
		"contains":   func(substr, s string) bool { return strings.Contains(s, substr) },
		"sha256sum": func(s string) string {
			h := sha256.Sum256([]byte(s))
			return hex.EncodeToString(h[:])
		},
		"int": toInt,
		"dict": func(kv ...any) map[string]any {
			m := map[string]any{}
			for i := 0; i+1 < len(kv); i += 2 {
				m[fmt.Sprint(kv[i])] = kv[i+1]
			}
			return m
		},
		// Sprig's merge: keys of the sources fill in what dst lacks (dst wins),
		// recursively for maps; dst is modified and returned.
		"merge": func(dst map[string]any, srcs ...map[string]any) map[string]any {
			var fill func(d, s map[string]any)
			fill = func(d, s map[string]any) {
				for k, v := range s {
					dv, ok := d[k]
					if !ok {
						d[k] = v
						continue
					}
					dm, ok1 := dv.(map[string]any)
					sm, ok2 := v.(map[string]any)
					if ok1 && ok2 {
						fill(dm, sm)
					}
				}
			}
			for _, s := range srcs {
				fill(dst, s)
			}
			return dst
		},
	}
	root.Funcs(funcs)

	tdir := filepath.Join(dir, "templates")
	entries, err := os.ReadDir(tdir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !(strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".tpl") || n == "NOTES.txt") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(tdir, n))
		if err != nil {
			return nil, err
		}
		full := path.Join(meta.Name, "templates", n)
		if _, err := root.New(full).Parse(string(b)); err != nil {
			return nil, fmt.Errorf("parse %s: %w", full, err)
		}
		names = append(names, full)
	}
	sort.Strings(names)
	out := map[string]string{}
	for _, full := range names {
		base := path.Base(full)
		if strings.HasPrefix(base, "_") {
			continue // partials
		}
		data := map[string]any{
			"Values":       values,
			"Release":      map[string]any{"Name": release, "Namespace": namespace, "Service": "Helm", "IsInstall": true, "IsUpgrade": false, "Revision": 1},
			"Chart":        map[string]any{"Name": meta.Name, "Version": meta.Version, "AppVersion": meta.AppVersion},
			"Files":        helmFiles{dir: dir},
			"Template":     map[string]any{"Name": full, "BasePath": path.Join(meta.Name, "templates")},
			"Capabilities": map[string]any{"KubeVersion": map[string]any{"Version": "v1.31.0", "Major": "1", "Minor": "31"}},
		}
		var buf bytes.Buffer
		if err := root.ExecuteTemplate(&buf, full, data); err != nil {
			return nil, fmt.Errorf("render %s: %w", full, err)
		}
		out[base] = strings.ReplaceAll(buf.String(), "<no value>", "")
	}
	return out, nil
}

// documents splits rendered YAML into its non-empty documents.
func documents(s string) []string {
	var out []string
	for _, d := range strings.Split("\n"+s, "\n---") {
		if strings.TrimSpace(stripComments(d)) != "" {
			out = append(out, d)
		}
	}
	return out
}

func stripComments(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}
