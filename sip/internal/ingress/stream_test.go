package ingress

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	sipmsg "github.com/emiago/sipgo/sip"
)

// feed writes data to a new scanner in chunks of the given sizes (cycled),
// returning the first error.
func feed(b Bounds, data []byte, chunks ...int) error {
	s := NewStreamScanner(b)
	if len(chunks) == 0 {
		chunks = []int{len(data) + 1}
	}
	for i, k := 0, 0; i < len(data); k++ {
		n := min(chunks[k%len(chunks)], len(data)-i)
		if n <= 0 {
			n = 1
		}
		if err := s.Write(data[i : i+n]); err != nil {
			return err
		}
		i += n
	}
	return nil
}

func TestStreamScanner(t *testing.T) {
	body := "v=0\r\n" + strings.Repeat("a=x;y;z;w\r\n", 100)
	withBody := "INVITE sip:a SIP/2.0\r\nVia: a;b\r\nContent-Length: " + itoa(len(body)) + "\r\n\r\n" + body
	hostile := "BYE sip:a SIP/2.0\r\nVia: a" + strings.Repeat(";p", 33) + "\r\nContent-Length: 0\r\n\r\n"
	for _, tc := range []struct {
		name string
		data string
		err  error
	}{
		{"invite", invite, nil},
		{"body with separators is skipped", withBody, nil},
		{"two messages and keepalives", "\r\n\r\n" + withBody + "\r\n\r\n" + invite, nil},
		{"compact content length", "BYE sip:a SIP/2.0\r\nl: 5\r\n\r\n;;;;;" + invite, nil},
		{"element over the bound", hostile, ErrParams},
		{"second message over the bound", invite + hostile, ErrParams},
		{"message over the bound", "BYE sip:a SIP/2.0\r\n" + strings.Repeat("Via: a"+strings.Repeat(";p", 30)+"\r\n", 9) + "\r\n", ErrParams},
		{"too many headers", "BYE sip:a SIP/2.0\r\n" + strings.Repeat("X:a\r\n", 201) + "\r\n", ErrHeaders},
		{"headers counted per message", strings.Repeat("BYE sip:a SIP/2.0\r\n"+strings.Repeat("X:a\r\n", 150)+"\r\n", 3), nil},
		{"folded field", "BYE sip:a SIP/2.0\r\nVia: a" + strings.Repeat(";p", 20) + "\r\n " + strings.Repeat(";p", 13) + "\r\n\r\n", ErrParams},
		{"list elements", "BYE sip:a SIP/2.0\r\nVia: a" + strings.Repeat(";p", 30) + ", b" + strings.Repeat(";p", 30) + "\r\n\r\n", nil},
		{"list elements are headers", "BYE sip:a SIP/2.0\r\nRecord-Route: " + strings.Repeat("<sip:a>,", 200) + "<sip:a>\r\n\r\n", ErrHeaders},
		{"list elements at the bound", "BYE sip:a SIP/2.0\r\nRoute: " + strings.Repeat("<sip:a>,", 199) + "<sip:a>\r\n\r\n", nil},
		{"bad content length", "BYE sip:a SIP/2.0\r\nContent-Length: x\r\n\r\n", ErrStream},
		// What sipgo reads apart from what the scanner read: each would
		// let the scanner skip, or not count, what sipgo parses.
		{"start line parameters", "INVITE sip:a" + strings.Repeat(";p", 33) + " SIP/2.0\r\nContent-Length: 0\r\n\r\n", ErrParams},
		// A bare LF is refused where it comes (a lenient next hop would
		// end the line there): before the scanner could miss what follows.
		{"bare LF empty line does not end the headers", "BYE sip:a SIP/2.0\r\nX: y\n\n" + hostile[len("BYE sip:a SIP/2.0\r\n"):], ErrStream},
		{"bare LF line without a colon", "BYE sip:a SIP/2.0\r\nVia: a\n" + strings.Repeat(";p", 33) + "\r\nContent-Length: 0\r\n\r\n", ErrStream},
		{"bare LF in a value", "BYE sip:a SIP/2.0\r\nX: a\nTo: <sip:b>\r\nContent-Length: 0\r\n\r\n", ErrStream},
		{"bare LF in the start line", "BYE sip:a\nX: y SIP/2.0\r\nContent-Length: 0\r\n\r\n", ErrStream},
		{"bare LF in a body", "BYE sip:a SIP/2.0\r\nContent-Length: 4\r\n\r\na\nb\n" + invite, nil},
		{"a name sipgo trims", "BYE sip:a SIP/2.0\r\n\vContent-Length: 0\r\nContent -Length: 300\r\n\r\n" + hostile, ErrStream},
		{"a blank inside a name", "BYE sip:a SIP/2.0\r\nl: 0\r\nContent -Length: 300\r\n\r\n" + hostile, ErrParams},
		{"digits apart", "BYE sip:a SIP/2.0\r\nContent-Length: 1 0\r\n\r\n0123456789", ErrStream},
		{"bare CR", "BYE sip:a SIP/2.0\r\nX: a\rb\r\n\r\n", ErrStream},
		{"escaped separators", "BYE sip:a SIP/2.0\r\nTo: <sip:a>;x=\"" + strings.Repeat("\\;", 33) + "\"\r\nl: 0\r\n\r\n", ErrParams},
		{"endless line", "BYE sip:a SIP/2.0\r\nX: " + strings.Repeat("a", 17<<10), ErrStream},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, chunks := range [][]int{nil, {1}, {7, 3}, {64}} {
				if err := feed(DefaultBounds, []byte(tc.data), chunks...); !errors.Is(err, tc.err) {
					t.Fatalf("chunks %v: got %v, want %v", chunks, err, tc.err)
				}
			}
		})
	}
}

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}

// headerSection turns any bytes into a header section both scanners read
// the same way: no empty line inside, no Content-Length, CRLF line ends,
// ending with the empty line.
func headerSection(data []byte) []byte {
	var out bytes.Buffer
	out.WriteString("BYE sip:a SIP/2.0\r\n")
	for _, line := range bytes.Split(data, []byte("\n")) {
		line = bytes.TrimRight(line, "\r")
		line = bytes.ReplaceAll(line, []byte("\r"), []byte(" "))
		if len(bytes.TrimLeft(line, " \t")) == 0 {
			continue
		}
		if c := bytes.IndexByte(line, ':'); c >= 0 {
			name := trimSpace(line[:c])
			if equalFold(name, "content-length") || equalFold(name, "l") {
				continue
			}
		}
		out.Write(line)
		out.WriteString("\r\n")
	}
	out.WriteString("\r\n")
	return out.Bytes()
}

// The stream scanner and Scan agree on every header section, whatever the
// chunks it arrives in.
func FuzzStreamMatchesScan(f *testing.F) {
	f.Add([]byte("Via: a;b;c, d;e\nFrom: <sip:x;y>;tag=1\n ;more;\"q;\"\n"), uint64(1))
	f.Add([]byte("X\n ;a;b;c;d;e;f;g;h;i\nVia: \"\\\";\";a"), uint64(7))
	f.Fuzz(func(t *testing.T, data []byte, seed uint64) {
		b := Bounds{ElementParams: 4, MessageParams: 9, Headers: 6}
		msg := headerSection(data)
		_, want := Scan(msg, b)
		r := rand.New(rand.NewPCG(seed, seed))
		chunks := []int{1 + r.IntN(8), 1 + r.IntN(64), 1 + r.IntN(3)}
		got := feed(b, msg, chunks...)
		// The stream scanner may refuse more (ErrStream: it frames as
		// sipgo does, and closes a stream whose names sipgo would trim).
		if !errors.Is(got, want) && !(errors.Is(got, ErrStream) && (want == nil || oddName(msg))) {
			t.Fatalf("stream %v, Scan %v for %q (chunks %v)", got, want, msg, chunks)
		}
	})
}

// oddName reports a header name (before a line's colon, or a whole line
// without one) with a control or non-ASCII byte, which the stream scanner
// refuses as ErrStream.
func oddName(msg []byte) bool {
	for _, line := range bytes.Split(msg, []byte("\r\n"))[1:] {
		if len(line) == 0 || line[0] == ' ' || line[0] == '\t' {
			continue
		}
		c := bytes.IndexByte(line, ':')
		if c < 0 {
			c = len(line)
		}
		for _, b := range line[:c] {
			if b != '\t' && (b < 0x20 || b >= 0x7f) {
				return true
			}
		}
	}
	return false
}

// countSeparators counts what Scan counts as parameter separators.
func countSeparators(s string) int { return strings.Count(s, ";") + strings.Count(s, "&") }

// The scanner and sipgo's stream parser frame a stream alike: whatever
// bytes come before a message over the bounds, and whatever the chunks,
// sipgo never parses a message over the bounds that the scanner let
// through. The chunks reach each as scanConn hands them on (sip/internal/conns/scan.go)
// and as sipgo's TCP loop reads them (it skips reads of NULs only and, idle,
// short keepalives; it stops at its first parse error).
func FuzzStreamFramesAsSipgo(f *testing.F) {
	f.Add([]byte("OPTIONS sip:a SIP/2.0\r\nContent-Length: 40\r\n\r\n"), uint64(1))
	f.Add([]byte("OPTIONS sip:a SIP/2.0\r\nX: y\n\nl: 0\r\n\r\n"), uint64(2))
	f.Add([]byte("OPTIONS sip:a SIP/2.0\r\n\vContent-Length: 0\r\nContent -Length: 400\r\n\r\n"), uint64(3))
	f.Add([]byte("OPTIONS sip:a SIP/2.0\r\nl: 1\r\n 0\r\n\r\n"), uint64(4))
	f.Add([]byte("\x00\x00\x00\r\n\r\nOPTIONS sip:a;x SIP/2.0\r\nl: 3\r\n\r\n\r\n\r\n"), uint64(5))
	var hostile strings.Builder
	hostile.WriteString("OPTIONS sip:a SIP/2.0\r\nVia: SIP/2.0/TCP h;branch=z9hG4bKx")
	for i := range 300 {
		hostile.WriteString(";p" + itoa(i))
	}
	hostile.WriteString("\r\nContent-Length: 0\r\n\r\n")
	f.Fuzz(func(t *testing.T, pre []byte, seed uint64) {
		if len(pre) > 4<<10 {
			return
		}
		data := append(append([]byte(nil), pre...), hostile.String()...)
		r := rand.New(rand.NewPCG(seed, seed))
		scan := NewStreamScanner(DefaultBounds)
		parser := sipmsg.NewParser()
		parser.MaxMessageLength = 16 << 10
		stream := parser.NewSIPStream()
		defer stream.Close()
		var parsed []sipmsg.Message
		idleSipgo := true
		for i := 0; i < len(data); {
			n := min(len(data)-i, 1+r.IntN(64))
			if r.IntN(4) == 0 {
				n = min(len(data)-i, 1+r.IntN(4))
			}
			chunk := data[i : i+n]
			i += n
			// scanConn.
			nul := len(bytes.Trim(chunk, "\x00")) == 0
			keepalive := len(chunk) <= 4 && len(bytes.Trim(chunk, "\r\n")) == 0
			if !nul && !(keepalive && scan.Idle()) {
				if err := scan.Write(chunk); err != nil {
					break // the connection is closed: sipgo sees nothing more
				}
			}
			// sipgo's TCP loop.
			if nul || (keepalive && idleSipgo) {
				continue
			}
			err := stream.ParseSIPStream(chunk, func(m sipmsg.Message) { parsed = append(parsed, m) })
			if err != nil && !errors.Is(err, sipmsg.ErrParseSipPartial) {
				break
			}
			idleSipgo = err == nil && stream.Buffer().Len() == 0
		}
		for _, m := range parsed {
			total := 0
			var hs []sipmsg.Header
			switch m := m.(type) {
			case *sipmsg.Request:
				total = countSeparators(m.Recipient.String())
				hs = m.Headers()
			case *sipmsg.Response:
				hs = m.Headers()
			}
			for _, h := range hs {
				total += countSeparators(h.Value())
			}
			if total > DefaultBounds.MessageParams {
				t.Fatalf("sipgo parsed a message with %d separators the scanner let through: %.300q", total, m.String())
			}
		}
	})
}

// Idle is where sipgo takes a short read of CRs and LFs for a keepalive:
// between messages with nothing of the next read. A CR read after a
// message is in sipgo's buffer (the LF that follows is parsed, not
// skipped): not idle, or the scanner would skip that LF, keep its CR,
// and refuse the next message as a stream sipgo reads cleanly.
func TestStreamScannerIdle(t *testing.T) {
	s := NewStreamScanner(DefaultBounds)
	if !s.Idle() {
		t.Fatal("a new scanner is not idle")
	}
	msg := "OPTIONS sip:a SIP/2.0\r\nContent-Length: 2\r\n\r\nab"
	for _, step := range []struct {
		write string
		idle  bool
	}{
		{msg[:10], false},
		{msg[10:], true},
		{"\r", false},
		{"\n", true},
		{msg, true},
	} {
		if err := s.Write([]byte(step.write)); err != nil {
			t.Fatalf("after %q: %v", step.write, err)
		}
		if s.Idle() != step.idle {
			t.Fatalf("after %q: Idle %v, want %v", step.write, s.Idle(), step.idle)
		}
	}
}
