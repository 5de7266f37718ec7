package config

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

// A key indented one space too few on line 7 is reported on line 7: the
// YAML library names the line where the enclosing block starts (line 3,
// "peers:", counted from 0), which sends the operator to the wrong place.
func TestYAMLSyntaxErrorLine(t *testing.T) {
	for _, tt := range []struct {
		name, yaml string
		line       int
	}{
		{"indent in a list item", "", 7}, // the fixture
		{"indent in a map", "a: 1\nb:\n  c: 2\n d: 3\n", 4},
		{"tab", "a: 1\nb:\n  c: 2\n\td: 3\n", 4},
		{"unclosed flow list", "a: 1\nb: [1,\n 2\nc: 3\n", 2},
		{"unterminated quote", "a: 1\nb: 'x\nc: 3\n", 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			if tt.yaml == "" {
				_, err = Load("../testdata/config/bad_yaml_indent.yaml")
			} else {
				_, err = Parse([]byte(tt.yaml))
			}
			var ve *ValidationError
			if !errors.As(err, &ve) || len(ve.Errors) != 1 {
				t.Fatalf("got %v, want one error", err)
			}
			want := "invalid YAML: line " + strconv.Itoa(tt.line) + ": "
			if !strings.HasPrefix(ve.Errors[0], want) || ve.At(0) != (Position{Line: tt.line}) {
				t.Errorf("got %q at %v, want %q... at line %d", ve.Errors[0], ve.At(0), want, tt.line)
			}
			if !strings.Contains(ve.Error(), "\n  line "+strconv.Itoa(tt.line)+": invalid YAML") {
				t.Errorf("Error() does not start the problem with its line:\n%s", ve.Error())
			}
		})
	}
}

// Type errors, unknown keys and rule violations carry the line and column
// of the key or list item they are about; a problem about a missing key
// points at its nearest parent in the file.
func TestErrorPositions(t *testing.T) {
	_, err := Load("../testdata/config/bad_many.yaml")
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("got %v, want *ValidationError", err)
	}
	want := map[string]Position{
		`carriers[0].max_wiat: unknown key (did you mean "max_wait"?)`:                                             {26, 59},
		`node_id: must be 1-253 letters, digits, '.', '_' or '-' (got "node 1")`:                                   {3, 1},
		`sip.listen[1]: must be udp://host:port, tcp://host:port or tls://host:port (got "sctp://127.0.0.1:5060")`: {5, 34},
		`sip.reject.code: must be a 4xx, 5xx or 6xx SIP status (got 99)`:                                           {6, 12},
		`store.redis.timeout: must be > 0 (got -1s)`:                                                               {9, 36},
		`peers[0].sources[1]: invalid CIDR "not-an-ip": want a network like 192.0.2.0/24 or an address`:            {14, 27},
		`peers[1].cps: must be > 0 (got -1)`:                                                                       {21, 5},
		`carriers[1].cps: must be > 0 (got -3)`:                                                                    {27, 56},
		`routes.default[1]: unknown carrier "carrier-x"`:                                                           {29, 24},
	}
	if len(ve.Where) != len(ve.Errors) {
		t.Fatalf("Where: got %d positions for %d errors", len(ve.Where), len(ve.Errors))
	}
	for i, line := range ve.Errors {
		if w, ok := want[line]; ok {
			if got := ve.At(i); got != w {
				t.Errorf("%s: at %v, want %v", line, got, w)
			}
			delete(want, line)
		} else if ve.At(i).Line == 0 {
			t.Errorf("%s: no place in the file", line)
		}
	}
	for line := range want {
		t.Errorf("missing error %q", line)
	}

	// A rule about a key the file lacks points at the block it belongs in.
	_, err = Parse([]byte("peers:\n  - name: dialer-1\n    cps: 5\n" + "carriers:\n  - {name: a, uri: \"sip:127.0.0.1:5070\", cps: 1}\nroutes: {default: [a]}\n"))
	if !errors.As(err, &ve) || len(ve.Errors) != 1 || !strings.HasPrefix(ve.Errors[0], "peers[0].sources: ") || ve.At(0) != (Position{2, 5}) {
		t.Errorf("missing sources: got %v at %v, want peers[0].sources at line 2, column 5", err, ve.At(0))
	}
}

// A key given twice in one mapping, or twice in different case (viper
// folds keys to lower case, the last one would win), is reported at the
// repeat with the first one's line, not as a YAML error whose message and
// line disagree (h55).
func TestDuplicateKeys(t *testing.T) {
	_, err := Parse([]byte("node_id: a\nshadow: true\nnode_id: b\nSIP: {record_route: false}\nsip: {record_route: true}\n"))
	var ve *ValidationError
	if !errors.As(err, &ve) || len(ve.Errors) != 2 {
		t.Fatalf("got %v, want two errors", err)
	}
	for i, want := range []struct {
		msg string
		at  Position
	}{
		{`node_id: the key "node_id" repeats "node_id" of line 1; keep one`, Position{Line: 3, Column: 1}},
		{`sip: the key "sip" repeats "SIP" of line 4 (keys are not case-sensitive); keep one`, Position{Line: 5, Column: 1}},
	} {
		if ve.Errors[i] != want.msg || ve.At(i) != want.at {
			t.Errorf("error %d: %q at %v, want %q at %v", i, ve.Errors[i], ve.At(i), want.msg, want.at)
		}
	}
}
