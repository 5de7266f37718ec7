package safetext

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

func TestEscape(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"plain ASCII", "Service Unavailable", "Service Unavailable"},
		{"empty", "", ""},
		{"printable Unicode", "Réseau occupé — 忙しい", "Réseau occupé — 忙しい"},
		{"backslash kept", `a\u202eb`, `a\u202eb`},
		{"right-to-left override", "Busy \u202eereH", `Busy \u202eereH`},
		{"left-to-right override", "a\u202db", `a\u202db`},
		{"embeddings and pop", "\u202a\u202b\u202c", `\u202a\u202b\u202c`},
		{"isolates", "x\u2066\u2067\u2068\u2069y", `x\u2066\u2067\u2068\u2069y`},
		{"marks", "\u200e\u200f\u061c", `\u200e\u200f\u061c`},
		{"zero-width", "a\u200bb\u200cc\u200dd\u2060e", `a\u200bb\u200cc\u200dd\u2060e`},
		{"byte-order mark", "\ufeffOK", `\ufeffOK`},
		{"soft hyphen", "in\u00advisible", `in\u00advisible`},
		{"tag character (Cf, astral)", "a\U000E0041b", `a\U000e0041b`},
		{"line and paragraph separators", "a\u2028b\u2029c", `a\u2028b\u2029c`},
		{"newline and carriage return", "OK\r\nVia: forged", `OK\u000d\u000aVia: forged`},
		{"tab, NUL, escape", "\t\x00\x1b[31m", `\u0009\u0000\u001b[31m`},
		{"DEL", "a\x7fb", `a\u007fb`},
		{"C1 controls", "a\u0085b\u009bc", `a\u0085b\u009bc`},
		{"invalid UTF-8", "a\xffb\xc3", `a\xffb\xc3`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Escape(tc.in)
			if got != tc.want {
				t.Errorf("Escape(%q) = %q, want %q", tc.in, got, tc.want)
			}
			if NeedsEscape(tc.in) != (tc.in != tc.want) {
				t.Errorf("NeedsEscape(%q) = %v, want %v", tc.in, NeedsEscape(tc.in), tc.in != tc.want)
			}
			if NeedsEscape(got) {
				t.Errorf("Escape(%q) = %q still needs escaping", tc.in, got)
			}
		})
	}
}

// TestEscapeKeepsCleanText: text with nothing to escape is returned as it
// is, without an allocation (the path of nearly every log line).
func TestEscapeKeepsCleanText(t *testing.T) {
	s := "call rejected: customer header names \"acme\" — déjà vu"
	if n := testing.AllocsPerRun(100, func() { _ = Escape(s) }); n != 0 {
		t.Errorf("Escape of clean text: %v allocations, want 0", n)
	}
}

// TestHandler: a record's message, string attributes (in groups, from
// WithAttrs, from a LogValuer) and error texts reach the log escaped.
func TestHandler(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(NewHandler(slog.NewJSONHandler(&buf, nil)))
	rlo := "\u202e"
	log = log.With("peer", "p"+rlo)
	log.Info("carrier answered "+rlo,
		"reason", "Busy"+rlo+"Here",
		slog.Group("g", "inner", "x\u2066y", "n", 3),
		"error", errors.New("bad\u200bthing"),
		"valuer", valuer{},
		"clean", "ok",
	)
	line := buf.String()
	if strings.Contains(line, rlo) || strings.Contains(line, "\u2066") || strings.Contains(line, "\u200b") || strings.Contains(line, "\u2029") {
		t.Fatalf("raw format character in the log line: %q", line)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{
		"msg": `carrier answered \u202e`, "peer": `p\u202e`, "reason": `Busy\u202eHere`,
		"error": `bad\u200bthing`, "valuer": `v\u2029`, "clean": "ok",
	} {
		if m[k] != want {
			t.Errorf("%s = %q, want %q", k, m[k], want)
		}
	}
	if g, _ := m["g"].(map[string]any); g == nil || g["inner"] != `x\u2066y` || g["n"] != 3.0 {
		t.Errorf("group = %v, want inner escaped and n kept", m["g"])
	}
	if NewHandler(log.Handler()) != log.Handler() || Logger(log) != log {
		t.Error("a safetext handler was wrapped twice")
	}
}

type valuer struct{}

func (valuer) LogValue() slog.Value { return slog.StringValue("v\u2029") }
