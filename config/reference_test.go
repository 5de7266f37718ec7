package config

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

var updateReference = flag.Bool("update", false, "rewrite ../docs/configuration.md from the schema")

const referencePath = "../docs/configuration.md"

// The generated part of docs/configuration.md lies between these markers;
// the text around them is written by hand and kept.
const (
	refBegin = "<!-- BEGIN GENERATED: go test ./config/ -run TestConfigurationReference -update -->"
	refEnd   = "<!-- END GENERATED -->"
)

// entryDocs describes the entries of a map setting ("<name>" rows).
var entryDocs = map[string]string{
	"routes.<name>": "The route named `<name>` (a peer's, customer's or destination's route names it): a list of carrier names, tried in order, or a block {policy, carriers}.",
}

// defaultNotes gives the default of the keys whose zero value stands for
// something computed, or that have none because they must be set.
var defaultNotes = map[string]string{
	"node_id":                       "the host name",
	"sip.strip_headers":             "[customer_header]",
	"peers[].name":                  "required",
	"peers[].sources":               "required",
	"peers[].cps":                   "required",
	"customers[].name":              "required",
	"customers[].cps":               "required",
	"carriers[].name":               "required",
	"carriers[].uri":                "required",
	"carriers[].cps":                "required",
	"carriers[].setup_timeout":      fmtDefault(reflect.ValueOf(DefaultSetupTimeout)),
	"carriers[].retry_after_max":    fmtDefault(reflect.ValueOf(DefaultRetryAfterMax)),
	"store.redis.expected_nodes":    "`0` (one node)",
	"carriers[].probe":              "on, as below",
	"carriers[].overload":           "as below",
	"carriers[].overload.codes":     "`[503]`",
	"carriers[].overload.decrease":  fmt.Sprintf("`%g`", DefaultDecrease),
	"carriers[].overload.min_cps":   fmt.Sprintf("%g %% of cps", DefaultMinShare*100),
	"carriers[].overload.increase":  fmt.Sprintf("%g %% of cps per second", DefaultIncreaseShare*100),
	"routes.<name>":                 "none",
	"store.redis":                   "unset: the in-process store",
	"store.redis.addrs":             "required",
	"peers[].reject":                "unset: sip.reject, sip.reject_calls",
	"customers[].reject":            "unset: sip.reject, sip.reject_calls",
	"destinations[].prefix":         "required",
	"peers[].reject.code":           "required",
	"peers[].reject.reason":         "required",
	"customers[].reject.code":       "required",
	"customers[].reject.reason":     "required",
	"destinations[].reject.code":    "required",
	"destinations[].reject.reason":  "required",
	"destinations[].reject":         "unset: sip.reject, sip.reject_calls",
	"carriers[].min_asr":            "`0` (off)",
	"carriers[].min_seizures":       fmt.Sprintf("`%d`", DefaultMinSeizures),
	"carriers[].asr_window":         fmtDefault(reflect.ValueOf(DefaultASRWindow)),
	"routes.<name>.policy":          "`\"ordered\"`",
	"routes.<name>.carriers":        "required",
	"routes.<name>.carriers[].name": "required",
}

type refRow struct {
	path, typ, def, reload, desc string
}

// fieldDocs maps "Type.Field" of every struct in this package's non-test
// sources to its doc comment (or trailing comment), and "Type" to the
// type's doc comment.
func fieldDocs(t *testing.T) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	docs := map[string]string{}
	for _, pkg := range pkgs {
		for _, f := range pkg.Files {
			for _, decl := range f.Decls {
				gd, ok := decl.(*ast.GenDecl)
				if !ok || gd.Tok != token.TYPE {
					continue
				}
				for _, spec := range gd.Specs {
					ts := spec.(*ast.TypeSpec)
					st, ok := ts.Type.(*ast.StructType)
					if !ok {
						continue
					}
					doc := ts.Doc
					if doc == nil && len(gd.Specs) == 1 {
						doc = gd.Doc
					}
					docs[ts.Name.Name] = oneParagraph(doc.Text())
					for _, fld := range st.Fields.List {
						text := fld.Doc.Text()
						if text == "" {
							text = fld.Comment.Text()
						}
						for _, n := range fld.Names {
							docs[ts.Name.Name+"."+n.Name] = oneParagraph(text)
						}
					}
				}
			}
		}
	}
	return docs
}

// oneParagraph joins a comment into one line for a table cell.
func oneParagraph(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	return strings.ReplaceAll(s, "|", `\|`)
}

// typeName names a setting's type for the reference.
func typeName(t reflect.Type) string {
	switch {
	case t == durationType:
		return "duration"
	case t == prefixType:
		return "CIDR"
	case t == routeType:
		return "list of names, or block"
	case t == reflect.TypeFor[[]RouteCarrier]():
		return "list of names or blocks"
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int:
		return "integer"
	case reflect.Float64:
		return "number"
	case reflect.Struct:
		return "block"
	case reflect.Pointer:
		return "block, optional"
	case reflect.Slice:
		if e := t.Elem(); e.Kind() == reflect.Struct && e != prefixType && e != durationType {
			return "list of blocks"
		}
		return "list of " + typeName(t.Elem()) + "s"
	case reflect.Map:
		return "map: name → " + typeName(t.Elem())
	}
	return t.String()
}

// fmtDefault formats a default value as it is written in the file.
func fmtDefault(v reflect.Value) string {
	if v.Type() == durationType {
		d := time.Duration(v.Int())
		switch {
		case d == 0:
			return "`0s`"
		case d%time.Hour == 0:
			return fmt.Sprintf("`%dh`", d/time.Hour)
		case d%time.Minute == 0:
			return fmt.Sprintf("`%dm`", d/time.Minute)
		}
		return "`" + d.String() + "`"
	}
	switch v.Kind() {
	case reflect.String:
		return fmt.Sprintf("`%q`", v.String())
	case reflect.Slice:
		if v.IsNil() {
			return "unset"
		}
		parts := make([]string, v.Len())
		for i := range v.Len() {
			parts[i] = strings.Trim(fmtDefault(v.Index(i)), "`\"")
		}
		return "`[" + strings.Join(parts, ", ") + "]`"
	case reflect.Struct, reflect.Pointer, reflect.Map:
		return ""
	}
	return fmt.Sprintf("`%v`", v.Interface())
}

// restartOnly reports whether path is, or is inside, a RestartOnly setting.
func restartOnly(path string) bool {
	for _, r := range RestartOnly {
		if path == r || strings.HasPrefix(path, r+".") || strings.HasPrefix(path, r+"[") {
			return true
		}
	}
	return false
}

// referenceRows walks the schema: every key the decoder knows, with its
// type, its default (from Default and setDefaults, or defaultNotes), and
// whether a reload applies it.
func referenceRows(t *testing.T) []refRow {
	docs := fieldDocs(t)
	var rows []refRow
	var walk func(prefix string, v reflect.Value)
	walk = func(prefix string, v reflect.Value) {
		st := v.Type()
		for i := range st.NumField() {
			f := st.Field(i)
			tag := f.Tag.Get("cfg")
			if tag == "" {
				continue
			}
			path := join(prefix, tag)
			fv := v.Field(i)
			desc := docs[st.Name()+"."+f.Name]
			ft := f.Type
			if desc == "" {
				e := ft
				if e.Kind() == reflect.Pointer || e.Kind() == reflect.Slice {
					e = e.Elem()
				}
				desc = docs[e.Name()]
			}
			row := refRow{path: path, typ: typeName(ft), def: fmtDefault(fv), reload: "reload", desc: desc}
			if restartOnly(path) {
				row.reload = "restart"
			}
			if note, ok := defaultNotes[path]; ok {
				row.def = note
			}
			if strings.Contains(desc, "0 means Default") && fv.IsZero() && defaultNotes[path] == "" {
				// The zero stands for a Default…: that is the default to show.
				t.Errorf("%s: its doc says 0 means a Default… but the reference would show %s: add it to defaultNotes", path, row.def)
			}
			rows = append(rows, row)
			switch {
			case ft == durationType || ft == prefixType:
			case ft.Kind() == reflect.Struct:
				walk(path, fv)
			case ft.Kind() == reflect.Pointer:
				nv := reflect.New(ft.Elem())
				setDefaults(nv.Interface())
				walk(path, nv.Elem())
			case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
				nv := reflect.New(ft.Elem())
				setDefaults(nv.Interface())
				walk(path+"[]", nv.Elem())
			case ft.Kind() == reflect.Map:
				et := ft.Elem()
				sub := refRow{path: path + ".<name>", typ: typeName(et), def: defaultNotes[path+".<name>"], reload: row.reload,
					desc: entryDocs[path+".<name>"]}
				rows = append(rows, sub)
				if et.Kind() == reflect.Struct {
					walk(sub.path, reflect.New(et).Elem())
				}
			}
		}
	}
	walk("", reflect.ValueOf(Default()).Elem())
	return rows
}

// renderReference writes the generated part: one table per top-level block
// (the top-level settings first).
func renderReference(rows []refRow) string {
	var b strings.Builder
	section := ""
	head := func(title string) {
		fmt.Fprintf(&b, "\n## %s\n\n| Key | Type | Default | Reload | Description |\n| --- | --- | --- | --- | --- |\n", title)
	}
	var top, rest []refRow
	for _, r := range rows {
		if !strings.ContainsAny(r.path, ".[") && r.typ != "block" && r.typ != "list of blocks" && !strings.HasPrefix(r.typ, "map") {
			top = append(top, r)
		} else {
			rest = append(rest, r)
		}
	}
	line := func(r refRow) {
		def := r.def
		if def == "" {
			def = "—"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", r.path, r.typ, def, r.reload, r.desc)
	}
	head("Top level")
	for _, r := range top {
		line(r)
	}
	for _, r := range rest {
		root := r.path
		if i := strings.IndexAny(root, ".["); i >= 0 {
			root = root[:i]
		}
		if root != section {
			section = root
			head("`" + root + "`")
		}
		line(r)
	}
	return b.String()
}

// TestConfigurationReference: docs/configuration.md lists every key the
// decoder knows, with its type, default and reload behaviour taken from the
// schema, so it cannot drift; -update rewrites its generated part.
func TestConfigurationReference(t *testing.T) {
	rows := referenceRows(t)
	for _, r := range rows {
		if r.desc == "" {
			t.Errorf("%s: no description: give its field (or type) a doc comment in package config (a map's entries: entryDocs)", r.path)
		}
	}
	for path := range defaultNotes {
		if !slices.ContainsFunc(rows, func(r refRow) bool { return r.path == path }) {
			t.Errorf("defaultNotes names %s, which is no key", path)
		}
	}
	gen := renderReference(rows)
	old, err := os.ReadFile(referencePath)
	if err != nil && !*updateReference {
		t.Fatal(err)
	}
	before, rest, ok := strings.Cut(string(old), refBegin)
	_, after, ok2 := strings.Cut(rest, refEnd)
	if !ok || !ok2 {
		if !*updateReference {
			t.Fatalf("%s: no %q ... %q markers", referencePath, refBegin, refEnd)
		}
		before, after = "# Configuration reference\n\n", "\n"
	}
	want := before + refBegin + "\n" + gen + "\n" + refEnd + after
	if *updateReference {
		if err := os.WriteFile(referencePath, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if string(old) != want {
		t.Errorf("%s is not what the schema says; regenerate it: go test ./config/ -run TestConfigurationReference -update", referencePath)
	}
}

// TestReferenceKnowsEveryKey is the check above from the other side: every
// key path the decoder accepts (fieldsOf on each struct) is a row, and the
// defaults shown are config's own.
func TestReferenceKnowsEveryKey(t *testing.T) {
	rows := referenceRows(t)
	byPath := map[string]refRow{}
	for _, r := range rows {
		byPath[r.path] = r
	}
	var keys func(prefix string, t reflect.Type) []string
	keys = func(prefix string, typ reflect.Type) []string {
		var out []string
		for tag, i := range fieldsOf(typ) {
			p := join(prefix, tag)
			out = append(out, p)
			ft := typ.Field(i).Type
			if ft.Kind() == reflect.Pointer || ft.Kind() == reflect.Slice {
				if e := ft.Elem(); e.Kind() == reflect.Struct && e != durationType {
					suffix := ""
					if ft.Kind() == reflect.Slice {
						suffix = "[]"
					}
					out = append(out, keys(p+suffix, e)...)
				}
			} else if ft.Kind() == reflect.Struct && ft != prefixType {
				out = append(out, keys(p, ft)...)
			}
		}
		return out
	}
	for _, k := range keys("", reflect.TypeFor[Config]()) {
		if _, ok := byPath[k]; !ok {
			t.Errorf("key %s is not in the reference", k)
		}
	}
	d := Default()
	for path, want := range map[string]string{
		"sip.listen":                fmtDefault(reflect.ValueOf(d.SIP.Listen)),
		"sip.drain_grace":           "`5s`",
		"http.listen":               fmt.Sprintf("`%q`", d.HTTP.Listen),
		"store.redis.timeout":       "`50ms`",
		"carriers[].probe.interval": fmtDefault(reflect.ValueOf(DefaultProbe.Interval)),
	} {
		if got := byPath[path].def; got != want {
			t.Errorf("%s: default %s, want %s", path, got, want)
		}
	}
	if r := byPath["sip.listen"]; r.reload != "restart" {
		t.Errorf("sip.listen: %s, want restart", r.reload)
	}
	if r := byPath["sip.drain_grace"]; r.reload != "reload" {
		t.Errorf("sip.drain_grace: %s, want reload", r.reload)
	}
}
