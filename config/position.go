package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Position is a place in the configuration file, 1-based. Column is 0 when
// only the line is known; Line is 0 when the problem has no place in the
// file (a missing key, an environment variable).
type Position struct {
	Line, Column int
}

// String is "line 7, column 5", "line 7", or "" for no place.
func (p Position) String() string {
	switch {
	case p.Line <= 0:
		return ""
	case p.Column <= 0:
		return fmt.Sprintf("line %d", p.Line)
	default:
		return fmt.Sprintf("line %d, column %d", p.Line, p.Column)
	}
}

// maxSyntaxLines bounds the search for the line of a YAML syntax error
// (syntaxLine parses up to that many prefixes of the file); a longer file
// keeps the YAML library's own line.
const maxSyntaxLines = 5000

// yamlLine matches the "line N: " the YAML library puts in its messages.
var yamlLine = regexp.MustCompile(`^line (\d+): `)

// syntaxError turns the YAML library's error for data into the message and
// position of the line where the file stops being YAML. The library reports
// the line where the enclosing block starts (the mapping on line 1 for a
// key indented one space too few on line 7, and 0-based at that), so the
// line is found again: it is the first line from which every longer prefix
// of the file fails to parse. A prefix that merely ends inside a flow list
// ("[a," on one line, "b]" on the next) parses again once the list closes,
// so it does not count.
func syntaxError(data []byte, err error) (string, Position) {
	msg := yamlMessage(err)
	line := syntaxLine(data)
	if line == 0 {
		if m := yamlLine.FindStringSubmatch(msg); m != nil {
			line, _ = strconv.Atoi(m[1])
		}
		return msg, Position{Line: line}
	}
	msg = yamlLine.ReplaceAllString(msg, "")
	return fmt.Sprintf("line %d: %s", line, msg), Position{Line: line}
}

// syntaxLine returns the 1-based line where data stops being YAML, or 0
// when it cannot tell (the whole file parses, or it is too long to search).
func syntaxLine(data []byte) int {
	lines := bytes.SplitAfter(data, []byte("\n"))
	if len(lines) > maxSyntaxLines || parses(data) {
		return 0
	}
	end := len(data)
	for k := len(lines) - 1; k >= 0; k-- {
		end -= len(lines[k])
		if parses(data[:end]) {
			return k + 1
		}
	}
	return 1
}

func parses(data []byte) bool {
	var v any
	return yaml.Unmarshal(data, &v) == nil
}

// yamlTree is the YAML tree of the file data, nil when data is not YAML
// (the parse reports that). Parse reads it once for positions,
// duplicateKeys and valueless.
func yamlTree(data []byte) *yaml.Node {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil
	}
	return &doc
}

// positions maps the path of every key and list item of the YAML tree doc
// (as the decoder names them: "carriers[1].cps", keys in lower case, as
// viper folds them) to where it starts. It returns nil for a nil doc.
// Aliases are followed; keys merged with "<<" have no place.
func positions(doc *yaml.Node) map[string]Position {
	if doc == nil {
		return nil
	}
	out := map[string]Position{}
	at := func(path string, n *yaml.Node) { out[path] = Position{Line: n.Line, Column: n.Column} }
	walkYAML(doc, true, func(path string, k *yaml.Node, _ map[string]*yaml.Node) bool {
		at(path, k)
		return true
	}, at)
	return out
}

// duplicateKeys reports every key of the YAML tree doc that repeats an
// earlier key of the same mapping, compared without case: viper folds
// every key to lower case, so "CPS" after "cps" (or "Default" beside the
// route "default") would silently replace it, the last one winning. Each
// is one message with the place of the repeat. Nil for a nil doc (not
// YAML: the parse reports that).
func duplicateKeys(doc *yaml.Node) (msgs []string, at []Position) {
	if doc == nil {
		return nil, nil
	}
	// Aliases are not followed: an anchor's mapping is walked where it
	// stands, and its repeats would be reported once per alias.
	walkYAML(doc, false, func(path string, k *yaml.Node, earlier map[string]*yaml.Node) bool {
		first := earlier[strings.ToLower(k.Value)]
		if first == nil {
			return true
		}
		what := fmt.Sprintf("the key %q repeats %q of line %d", k.Value, first.Value, first.Line)
		if k.Value != first.Value {
			what += " (keys are not case-sensitive)"
		}
		msgs = append(msgs, path+": "+what+"; keep one")
		at = append(at, Position{Line: k.Line, Column: k.Column})
		return false
	}, nil)
	return msgs, at
}

// walkYAML walks the YAML tree n: key is called with every key of every
// mapping (its path as the decoder names it, keys in lower case, and the
// mapping's earlier keys by lower-case name) and walks its value when it
// returns true; item, when set, is called with every list item. Keys
// merged with "<<" are skipped; aliases are followed when aliases is set.
// The walk stops 64 levels deep.
func walkYAML(n *yaml.Node, aliases bool, key func(path string, k *yaml.Node, earlier map[string]*yaml.Node) bool, item func(path string, c *yaml.Node)) {
	var walk func(path string, n *yaml.Node, depth int)
	walk = func(path string, n *yaml.Node, depth int) {
		if n == nil || depth > 64 {
			return
		}
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(path, c, depth+1)
			}
		case yaml.AliasNode:
			if aliases {
				walk(path, n.Alias, depth+1)
			}
		case yaml.MappingNode:
			earlier := map[string]*yaml.Node{}
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				if k.Value == "<<" {
					continue
				}
				low := strings.ToLower(k.Value)
				p := join(path, low)
				descend := key(p, k, earlier)
				if _, ok := earlier[low]; !ok {
					earlier[low] = k
				}
				if descend {
					walk(p, v, depth+1)
				}
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				p := fmt.Sprintf("%s[%d]", path, i)
				if item != nil {
					item(p, c)
				}
				walk(p, c, depth+1)
			}
		}
	}
	walk("", n, 0)
}

// locate returns where the problem at path is: the environment variable
// that set it, when one did, else its place in the file (or the place of
// its nearest parent that is in the file: "peers[0].route: not set" points
// at peers[0]).
func locate(pos map[string]Position, envSet map[string]string, path string) (Position, string) {
	if v := envSet[settingOf(path)]; v != "" {
		return Position{}, v
	}
	for p := path; p != ""; {
		if at, ok := pos[p]; ok {
			return at, ""
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return Position{}, ""
}

// envOnly returns the environment variables that set keys under block
// (sorted) when the file does not have block: store.redis built from
// CPSGUARD_STORE_REDIS_PASSWORD alone. Nil when the file has it.
func envOnly(pos map[string]Position, envSet map[string]string, block string) []string {
	if _, ok := pos[block]; ok {
		return nil
	}
	var names []string
	for path, name := range envSet {
		if strings.HasPrefix(path, block+".") {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// settingOf strips list indexes from a path: "sip.listen[1]" is the
// setting sip.listen.
func settingOf(path string) string {
	for strings.HasSuffix(path, "]") {
		i := strings.LastIndexByte(path, '[')
		if i < 0 {
			break
		}
		path = path[:i]
	}
	return path
}

// envOverrides maps the dotted path of every setting that an environment
// variable sets (non-empty, as viper reads them) to that variable's name.
func envOverrides() map[string]string {
	out := map[string]string{}
	for _, key := range envKeys(reflect.TypeFor[Config](), "") {
		name := envName(key)
		if os.Getenv(name) != "" {
			out[strings.ReplaceAll(key, keyDelim, ".")] = name
		}
	}
	return out
}

// valueless reports whether the YAML tree doc has the key at keys (each a
// key of a mapping, from the top: "store", "redis") with a null or
// empty-mapping value ("redis:", "redis: {}"): the YAML library hands such
// a key to the decoder as if it were not there (outside a list item),
// which matters for store.redis (Parse).
func valueless(doc *yaml.Node, keys ...string) bool {
	if doc == nil || len(doc.Content) == 0 {
		return false
	}
	n := doc.Content[0]
	for _, key := range keys {
		if n.Kind != yaml.MappingNode {
			return false
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if strings.EqualFold(n.Content[i].Value, key) {
				next = n.Content[i+1]
			}
		}
		if next == nil {
			return false
		}
		n = next
	}
	return (n.Kind == yaml.ScalarNode && n.Tag == "!!null") || (n.Kind == yaml.MappingNode && len(n.Content) == 0)
}

// inTree reports whether path ("store.redis", "peers[0].reject") names a
// value in tree, the settings as viper hands them to the decoder.
func inTree(tree map[string]any, path string) bool {
	var cur any = tree
	for _, seg := range strings.Split(path, ".") {
		name, idx, _ := strings.Cut(seg, "[")
		m, ok := cur.(map[string]any)
		if !ok {
			return false
		}
		if cur, ok = m[name]; !ok {
			return false
		}
		for idx != "" {
			var n string
			n, idx, _ = strings.Cut(idx, "]")
			idx = strings.TrimPrefix(idx, "[")
			i, err := strconv.Atoi(n)
			l, ok := cur.([]any)
			if err != nil || !ok || i < 0 || i >= len(l) {
				return false
			}
			cur = l[i]
		}
	}
	return true
}

// extraDocuments returns the line of the file's second YAML document
// (the first after the first that is not empty), 0 when it has none:
// cpsguard reads the first only, so settings after a "---" would be
// ignored without a word.
func extraDocuments(data []byte) int {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var first yaml.Node
	if dec.Decode(&first) != nil {
		return 0 // not YAML: the parse says so
	}
	for range 1000 {
		var next yaml.Node
		err := dec.Decode(&next)
		switch {
		case errors.Is(err, io.EOF):
			return 0
		case err != nil:
			return lineOfErr(err) // a later document that is not YAML either
		case len(next.Content) == 0 || (next.Content[0].Kind == yaml.ScalarNode && next.Content[0].Tag == "!!null"):
			continue // a "---" with nothing after it
		}
		return max(next.Content[0].Line, 1)
	}
	return 1
}

// lineOfErr is the line the YAML library names in err ("yaml: line 7:
// …"), 1 when it names none.
func lineOfErr(err error) int {
	if m := yamlLine.FindStringSubmatch(strings.TrimPrefix(err.Error(), "yaml: ")); m != nil {
		if n, _ := strconv.Atoi(m[1]); n > 0 {
			return n
		}
	}
	return 1
}
