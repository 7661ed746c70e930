package explain

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// kindsWritten reads the agent's and actuators' sources for every kind
// they journal: the kind argument of the record functions, the Kind of an
// act.Event or ActionRecord literal, the literals a variable named kind is
// set to, what actionKind returns, and from the judge the
// judge.DutyDecision constants (the duty controller's kinds). A kind computed some other way fails the test, so
// that this list cannot fall behind.
func kindsWritten(t *testing.T) map[string]string {
	t.Helper()
	// Where the kind is among a recording call's arguments, by the
	// method's name and its number of arguments (Agent.record has 6,
	// arbiter.record 7, Agent.recordSlot 5; a sensor health's record and
	// act's have other counts and record no kind).
	kindArg := map[string]map[int]int{"record": {6: 2, 7: 3}, "recordSlot": {5: 2}}
	found := map[string]string{}
	fset := token.NewFileSet()
	apiKinds := apiActionKinds(t, fset)
	for _, dir := range []string{"../agent", "../act"} {
		for _, f := range parseDir(t, fset, dir) {
			note := func(e ast.Expr, what string) {
				pos := fset.Position(e.Pos()).String()
				switch x := e.(type) {
				case *ast.BasicLit:
					s, _ := strconv.Unquote(x.Value)
					found[s] = pos
				case *ast.Ident:
					if x.Name != "kind" {
						t.Errorf("%s: %s kind from %s: teach kindsWritten where it comes from", pos, what, x.Name)
					}
				case *ast.SelectorExpr:
					// A constant of the wire types' ActionKind.
					if pkg, ok := x.X.(*ast.Ident); ok && pkg.Name == "api" {
						if v, ok := apiKinds[x.Sel.Name]; ok {
							found[v] = pos
							return
						}
					}
					t.Errorf("%s: %s kind from %s: teach kindsWritten where it comes from", pos, what, x.Sel.Name)
				case *ast.CallExpr:
					if fn, ok := x.Fun.(*ast.Ident); ok && (fn.Name == "actionKind" || fn.Name == "string") {
						return
					}
					// A conversion to the wire type of a duty controller's
					// judge.DutyDecision (read from its constants below).
					if fn, ok := x.Fun.(*ast.SelectorExpr); ok && fn.Sel.Name == "ActionKind" {
						return
					}
					t.Errorf("%s: %s kind from a call: teach kindsWritten where it comes from", pos, what)
				default:
					t.Errorf("%s: %s kind from %T", pos, what, e)
				}
			}
			ast.Inspect(f, func(n ast.Node) bool {
				switch x := n.(type) {
				case *ast.CallExpr:
					if sel, ok := x.Fun.(*ast.SelectorExpr); ok {
						if i, ok := kindArg[sel.Sel.Name][len(x.Args)]; ok {
							note(x.Args[i], sel.Sel.Name)
						}
					}
				case *ast.CompositeLit:
					typ := ""
					switch tx := x.Type.(type) {
					case *ast.Ident:
						typ = tx.Name
					case *ast.SelectorExpr:
						typ = tx.Sel.Name
					}
					if typ != "Event" && typ != "ActionRecord" {
						return true
					}
					for _, el := range x.Elts {
						if kv, ok := el.(*ast.KeyValueExpr); ok {
							if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "Kind" {
								if sel, ok := kv.Value.(*ast.SelectorExpr); ok && sel.Sel.Name == "Kind" {
									continue // copied from another record
								}
								note(kv.Value, typ)
							}
						}
					}
				case *ast.AssignStmt:
					for i, l := range x.Lhs {
						if id, ok := l.(*ast.Ident); ok && id.Name == "kind" && i < len(x.Rhs) {
							// ("" is a probe kind's zero, in proofCPU)
							if lit, ok := x.Rhs[i].(*ast.BasicLit); ok && lit.Kind == token.STRING && lit.Value != `""` {
								note(lit, "kind variable")
							}
							if sel, ok := x.Rhs[i].(*ast.SelectorExpr); ok {
								if pkg, ok := sel.X.(*ast.Ident); ok && pkg.Name == "api" {
									note(sel, "kind variable")
								}
							}
						}
					}
				case *ast.FuncDecl:
					if x.Name.Name == "actionKind" {
						ast.Inspect(x.Body, func(n ast.Node) bool {
							if r, ok := n.(*ast.ReturnStmt); ok {
								for _, e := range r.Results {
									note(e, "actionKind")
								}
							}
							return true
						})
						return false
					}
				}
				return true
			})
		}
	}
	// The judge journals nothing itself: only its duty controller's
	// decisions are read, which the agent journals as api.ActionKind(d).
	for _, f := range parseDir(t, fset, "../judge") {
		ast.Inspect(f, func(n ast.Node) bool {
			vs, ok := n.(*ast.ValueSpec)
			if !ok {
				return true
			}
			if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "DutyDecision" {
				return true
			}
			for _, v := range vs.Values {
				pos := fset.Position(v.Pos()).String()
				lit, ok := v.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					t.Errorf("%s: judge.DutyDecision from %T: teach kindsWritten where it comes from", pos, v)
					continue
				}
				s, _ := strconv.Unquote(lit.Value)
				found[s] = pos
			}
			return true
		})
	}
	return found
}

// parseDir parses the non-test Go files of dir.
func parseDir(t *testing.T, fset *token.FileSet, dir string) []*ast.File {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []*ast.File
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, f)
	}
	return out
}

// apiActionKinds reads internal/api's ActionKind constants: name → value.
func apiActionKinds(t *testing.T, fset *token.FileSet) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, f := range parseDir(t, fset, "../api") {
		ast.Inspect(f, func(n ast.Node) bool {
			if vs, ok := n.(*ast.ValueSpec); ok {
				if id, ok := vs.Type.(*ast.Ident); ok && id.Name == "ActionKind" {
					for i, nm := range vs.Names {
						if i < len(vs.Values) {
							if lit, ok := vs.Values[i].(*ast.BasicLit); ok {
								out[nm.Name], _ = strconv.Unquote(lit.Value)
							}
						}
					}
				}
			}
			return true
		})
	}
	if len(out) == 0 {
		t.Fatal("no ActionKind constants found in internal/api")
	}
	return out
}

func TestKnowsEveryKindTheAgentWrites(t *testing.T) {
	found := kindsWritten(t)
	// The floor of what must be found: if the reading above misses these,
	// it reads nothing.
	for _, k := range []string{"start", "stop", "detection", "proof", "proof-free", "throttle", "tighten", "relax", "release", "isolate", "error", "restore", "unowned", "useless"} {
		if _, ok := found[k]; !ok {
			t.Errorf("kind %q not found in the agent's sources", k)
		}
	}
	for k, pos := range found {
		if k == "keep" || k == "useless" {
			continue // judge.DutyDecision values the agent never journals
		}
		if !Knows(k) {
			t.Errorf("%s: the agent journals kind %q, which explain does not know", pos, k)
		}
	}
	ks := slices.Sorted(maps.Keys(found))
	t.Logf("kinds journalled: %v", ks)
}
