package sipparse

import (
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"

	sipmsg "github.com/emiago/sipgo/sip"
)

// sipgoParse is the reference: sipgo's parser as the node builds it, with
// a panic turned into an error (sipgo's parser is not ours to fix; Parse
// must not panic where it does).
func sipgoParse(data []byte, max int) (msg sipmsg.Message, err error, panicked any) {
	defer func() {
		if r := recover(); r != nil {
			panicked = r
		}
	}()
	p := sipmsg.NewParser()
	p.MaxMessageLength = max
	msg, err = p.ParseSIP(data)
	return msg, err, nil
}

var sentinels = []error{sipmsg.ErrMessageTooLarge, sipmsg.ErrParseEOF, sipmsg.ErrParseLineNoCRLF, sipmsg.ErrParseReadBodyIncomplete, sipmsg.ErrParseSipPartial}

// diff says how Parse's result differs from sipgo's for data, or "".
func diff(data []byte, max int) string {
	want, wantErr, panicked := sipgoParse(data, max)
	got, gotErr := ParseMax(data, max)
	if panicked != nil {
		// sipgo panicked: Parse only has to not panic (it did not, or
		// the caller's test fails on its panic).
		return ""
	}
	if (wantErr == nil) != (gotErr == nil) {
		return fmt.Sprintf("error: got %v, want %v", gotErr, wantErr)
	}
	if wantErr != nil {
		if wantErr.Error() != gotErr.Error() {
			return fmt.Sprintf("error text: got %q, want %q", gotErr, wantErr)
		}
		for _, s := range sentinels {
			if errors.Is(wantErr, s) != errors.Is(gotErr, s) {
				return fmt.Sprintf("errors.Is(%v): got %v, want %v", s, errors.Is(gotErr, s), errors.Is(wantErr, s))
			}
		}
		if errors.Is(wantErr, sipmsg.ErrParseReadBodyIncomplete) {
			// The one documented difference: no zero-padded body beside
			// this error.
			return ""
		}
	}
	if !reflect.DeepEqual(want, got) {
		return fmt.Sprintf("message (err %v):\n got %s\nwant %s", wantErr, describe(got), describe(want))
	}
	return ""
}

// describe prints a message with the Go type and value of every header.
func describe(m sipmsg.Message) string {
	if m == nil || reflect.ValueOf(m).IsNil() {
		return "<nil>"
	}
	var b strings.Builder
	switch m := m.(type) {
	case *sipmsg.Request:
		fmt.Fprintf(&b, "%#v %#v %q\n", m.Method, m.Recipient, m.SipVersion)
	case *sipmsg.Response:
		fmt.Fprintf(&b, "%d %q %q\n", m.StatusCode, m.Reason, m.SipVersion)
	}
	for _, h := range headersOf(m) {
		fmt.Fprintf(&b, "  %T %#v\n", h, h)
	}
	fmt.Fprintf(&b, "  body %q", m.Body())
	return b.String()
}

// variants are data and what a datagram cut or mangled from it looks
// like: every prefix, LF for CRLF, CR for CRLF, and each line dropped.
func variants(data []byte) [][]byte {
	out := [][]byte{data}
	for i := 0; i < len(data); i++ {
		out = append(out, data[:i])
	}
	s := string(data)
	out = append(out, []byte(strings.ReplaceAll(s, "\r\n", "\n")), []byte(strings.ReplaceAll(s, "\r\n", "\r")))
	lines := strings.SplitAfter(s, "\r\n")
	for i := range lines {
		out = append(out, []byte(strings.Join(lines[:i], "")+strings.Join(lines[i+1:], "")))
	}
	return out
}

func corpus(tb testing.TB) map[string][]byte {
	out := fileCorpus(tb)
	for _, m := range callMessages {
		out["call/"+m.name] = []byte(m.msg)
	}
	for i, m := range edgeMessages {
		out[fmt.Sprintf("edge/%d", i)] = []byte(m)
	}
	for i, m := range proxySeeds {
		out[fmt.Sprintf("proxyseed/%d", i)] = []byte(m)
	}
	return out
}

// TestParseSameAsSipgo: for every message of the corpus and every
// variant of it, Parse returns what sipgo's parser returns.
func TestParseSameAsSipgo(t *testing.T) {
	c := corpus(t)
	if len(c) < 200 {
		t.Fatalf("corpus has %d messages: the testdata folders were not found", len(c))
	}
	names := make([]string, 0, len(c))
	for n := range c {
		names = append(names, n)
	}
	sort.Strings(names)
	var checked, parsed int
	for _, name := range names {
		for i, v := range variants(c[name]) {
			checked++
			if _, err := Parse(v); err == nil {
				parsed++
			}
			if d := diff(v, sipmsg.ParseMaxMessageLength); d != "" {
				t.Errorf("%s variant %d %q: %s", name, i, v, d)
			}
		}
	}
	t.Logf("%d inputs from %d messages, %d parsed", checked, len(c), parsed)
}

// TestParseSameBound: the size bound refuses what sipgo's refuses, with
// sipmsg.ErrMessageTooLarge (the node counts it as "oversized").
func TestParseSameBound(t *testing.T) {
	inv := []byte(callMessages[0].msg)
	hdr := strings.Index(string(inv), "\r\n\r\n") + 4
	for _, max := range []int{0, 1, hdr - 1, hdr, hdr + 1, len(inv) - 1, len(inv), len(inv) + 1, 16 * 1024} {
		if d := diff(inv, max); d != "" {
			t.Errorf("max %d: %s", max, d)
		}
		_, err := ParseMax(inv, max)
		if wantBig := max < len(inv); errors.Is(err, sipmsg.ErrMessageTooLarge) != wantBig {
			t.Errorf("max %d of %d bytes: got %v, want ErrMessageTooLarge %v", max, len(inv), err, wantBig)
		}
	}
	big := []byte(crlf("MESSAGE sip:a@b SIP/2.0", "Content-Length: 60000", "", "x"))
	if d := diff(big, 100); d != "" {
		t.Error(d)
	}
	if _, err := ParseMax(big, 100); !errors.Is(err, sipmsg.ErrMessageTooLarge) {
		t.Errorf("declared body over the bound: got %v, want ErrMessageTooLarge", err)
	}
}

// TestParseFewerAllocations: Parse allocates at most half as often as
// sipgo's parser on each of a call's datagrams.
func TestParseFewerAllocations(t *testing.T) {
	p := sipmsg.NewParser()
	for _, m := range callMessages {
		data := []byte(m.msg)
		theirs := testing.AllocsPerRun(50, func() { _, _ = p.ParseSIP(data) })
		ours := testing.AllocsPerRun(50, func() { _, _ = Parse(data) })
		t.Logf("%s: %v allocations, sipgo %v", m.name, ours, theirs)
		if ours > theirs/2 {
			t.Errorf("%s: got %v allocations, want at most half of sipgo's %v", m.name, ours, theirs)
		}
	}
}

// FuzzParseSameAsSipgo: on any input, Parse does not panic and returns
// what sipgo's parser returns.
func FuzzParseSameAsSipgo(f *testing.F) {
	for _, b := range corpus(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if d := diff(data, sipmsg.ParseMaxMessageLength); d != "" {
			t.Errorf("%q: %s", data, d)
		}
	})
}

// BenchmarkParse: a call's five datagrams, sipgo's parser and Parse.
func BenchmarkParse(b *testing.B) {
	for _, m := range callMessages {
		data := []byte(m.msg)
		b.Run("sipgo/"+m.name, func(b *testing.B) {
			p := sipmsg.NewParser()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := p.ParseSIP(data); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("sipparse/"+m.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Parse(data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func headersOf(m sipmsg.Message) []sipmsg.Header {
	switch m := m.(type) {
	case *sipmsg.Request:
		return m.Headers()
	case *sipmsg.Response:
		return m.Headers()
	}
	return nil
}
