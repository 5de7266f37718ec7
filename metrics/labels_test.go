package metrics

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// sourceFiles parses every non-test Go file of the module under root
// (bench/ is a module of its own), by slash path relative to root.
func sourceFiles(t *testing.T, root string) map[string]*ast.File {
	t.Helper()
	fset := token.NewFileSet()
	out := map[string]*ast.File{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel == "bench" || rel == "testdata" || strings.HasPrefix(d.Name(), ".") && rel != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		out[rel] = f
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 50 {
		t.Fatalf("found %d Go files under %s; the walk missed the module", len(out), root)
	}
	return out
}

// stringLit returns the value of e when it is a string literal.
func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	v, err := strconv.Unquote(lit.Value)
	return v, err == nil
}

// calledName is the name of the function or method a call calls.
func calledName(c *ast.CallExpr) string {
	switch f := c.Fun.(type) {
	case *ast.Ident:
		return f.Name
	case *ast.SelectorExpr:
		return f.Sel.Name
	}
	return ""
}

// isSIPErrors reports whether e is X.SIPErrors.WithLabelValues.
func isSIPErrors(c *ast.CallExpr) bool {
	sel, ok := c.Fun.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != "WithLabelValues" {
		return false
	}
	inner, ok := sel.X.(*ast.SelectorExpr)
	return ok && inner.Sel.Name == "SIPErrors"
}

var snakeWord = regexp.MustCompile(`^[a-z][a-z_]*$`)

// The known label values started at 0 (SIPErrorReasons, PanicPlaces,
// StoreScripts) are exactly the ones the code uses, read from its source:
// a reason, a place or a script added without its list entry would have no
// series until its first event, and one left in a list after the code
// dropped it would be a series that can never move.
//
// What counts as a use: for panics, a string literal passed to Recover,
// Report or guarded, assigned to a variable named where, or passed to the
// read path's Panic hook (sip/internal/ingress, reported as "sip." + it);
// for SIP errors, in sip/, a literal passed to SIPErrors.WithLabelValues or
// to the local helpers refuse, refused and drop, or assigned to a variable
// named reason, and the ingress Drop* constants passed to its Drop hook;
// for scripts, the lua.Script* constants.
func TestKnownLabelValuesMatchTheCode(t *testing.T) {
	files := sourceFiles(t, "..")
	found := map[string]map[string]string{"panic": {}, "sip": {}, "script": {}} // value -> file
	ingressConsts := map[string]string{}
	var ingressDrops []string

	for rel, f := range files {
		inSIP := strings.HasPrefix(rel, "sip/")
		inIngress := strings.HasPrefix(rel, "sip/internal/ingress/")
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				if len(n.Args) == 0 {
					return true
				}
				name := calledName(n)
				v, lit := stringLit(n.Args[0])
				switch {
				case lit && (name == "Recover" || name == "Report" || name == "guarded"):
					found["panic"][v] = rel
				case lit && inIngress && name == "Panic":
					found["panic"]["sip."+v] = rel
				case inSIP && lit && (isSIPErrors(n) || name == "refuse" || name == "refused" || name == "drop"):
					found["sip"][v] = rel
				case inIngress && name == "Drop":
					if id, ok := n.Args[0].(*ast.Ident); ok {
						ingressDrops = append(ingressDrops, id.Name)
					}
				}
			case *ast.AssignStmt:
				if len(n.Lhs) != 1 || len(n.Rhs) != 1 {
					return true
				}
				id, ok := n.Lhs[0].(*ast.Ident)
				v, lit := stringLit(n.Rhs[0])
				if !ok || !lit {
					return true
				}
				switch {
				case id.Name == "where":
					found["panic"][v] = rel
				case inSIP && id.Name == "reason" && snakeWord.MatchString(v):
					found["sip"][v] = rel
				}
			case *ast.ValueSpec:
				for i, id := range n.Names {
					if i >= len(n.Values) {
						break
					}
					v, lit := stringLit(n.Values[i])
					switch {
					case !lit:
					case inIngress && strings.HasPrefix(id.Name, "Drop"):
						ingressConsts[id.Name] = v
					case strings.HasPrefix(rel, "lua/") && strings.HasPrefix(id.Name, "Script") && id.IsExported():
						found["script"][v] = rel
					}
				}
			}
			return true
		})
	}
	for _, name := range ingressDrops {
		v, ok := ingressConsts[name]
		if !ok {
			t.Errorf("ingress passes %s to its Drop hook: constant not found", name)
			continue
		}
		found["sip"][v] = "sip/internal/ingress"
	}

	for _, tc := range []struct {
		kind, list string
		known      []string
	}{
		{"panic", "PanicPlaces", PanicPlaces},
		{"sip", "SIPErrorReasons", SIPErrorReasons},
		{"script", "StoreScripts", StoreScripts},
	} {
		if len(found[tc.kind]) < 5 {
			t.Errorf("%s: found only %v in the source; the scan is broken", tc.list, found[tc.kind])
		}
		for v, where := range found[tc.kind] {
			if !slices.Contains(tc.known, v) {
				t.Errorf("%s uses %q, which is not in metrics.%s: its series would not exist before its first event", where, v, tc.list)
			}
		}
		for _, v := range tc.known {
			if _, ok := found[tc.kind][v]; !ok {
				t.Errorf("metrics.%s lists %q, which the code no longer uses", tc.list, v)
			}
		}
	}
}
