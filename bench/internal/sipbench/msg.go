package sipbench

import (
	"bytes"
	"strings"
)

// msg is a parsed SIP message: start line and headers in order. Values
// point into the datagram they were read from.
type msg struct {
	start   string
	request bool
	method  string // requests
	code    int    // responses
	hdrs    []hdr
}

type hdr struct{ name, value string }

// compact maps compact header forms to their full names (lower case).
var compact = map[string]string{
	"i": "call-id", "v": "via", "f": "from", "t": "to", "m": "contact",
	"l": "content-length", "c": "content-type", "k": "supported",
}

// parse reads the start line and headers of b. It returns false for
// anything that does not look like SIP.
func parse(b []byte) (msg, bool) {
	var m msg
	end := bytes.Index(b, []byte("\r\n\r\n"))
	if end < 0 {
		end = len(b)
	}
	lines := strings.Split(string(b[:end]), "\r\n")
	if len(lines) == 0 {
		return m, false
	}
	m.start = lines[0]
	f := strings.SplitN(m.start, " ", 3)
	if len(f) < 3 {
		return m, false
	}
	if f[0] == "SIP/2.0" {
		code := 0
		for _, ch := range f[1] {
			if ch < '0' || ch > '9' {
				return m, false
			}
			code = code*10 + int(ch-'0')
		}
		m.code = code
	} else {
		m.request = true
		m.method = f[0]
	}
	for _, l := range lines[1:] {
		if l == "" {
			continue
		}
		if (l[0] == ' ' || l[0] == '\t') && len(m.hdrs) > 0 {
			m.hdrs[len(m.hdrs)-1].value += " " + strings.TrimSpace(l)
			continue
		}
		i := strings.IndexByte(l, ':')
		if i <= 0 {
			continue
		}
		name := strings.ToLower(strings.TrimSpace(l[:i]))
		if full, ok := compact[name]; ok {
			name = full
		}
		m.hdrs = append(m.hdrs, hdr{name, strings.TrimSpace(l[i+1:])})
	}
	return m, true
}

// get returns the first value of header name (lower case), or "".
func (m *msg) get(name string) string {
	for _, h := range m.hdrs {
		if h.name == name {
			return h.value
		}
	}
	return ""
}

// all returns every value of header name, splitting comma-separated lists
// outside angle brackets and quotes.
func (m *msg) all(name string) []string {
	var out []string
	for _, h := range m.hdrs {
		if h.name == name {
			out = append(out, splitList(h.value)...)
		}
	}
	return out
}

func splitList(v string) []string {
	var out []string
	depth, quoted, startAt := 0, false, 0
	for i := 0; i < len(v); i++ {
		switch v[i] {
		case '"':
			quoted = !quoted
		case '<':
			if !quoted {
				depth++
			}
		case '>':
			if !quoted && depth > 0 {
				depth--
			}
		case ',':
			if !quoted && depth == 0 {
				out = append(out, strings.TrimSpace(v[startAt:i]))
				startAt = i + 1
			}
		}
	}
	if s := strings.TrimSpace(v[startAt:]); s != "" {
		out = append(out, s)
	}
	return out
}

// cseqMethod returns the method of the CSeq header.
func (m *msg) cseqMethod() string {
	f := strings.Fields(m.get("cseq"))
	if len(f) == 2 {
		return f[1]
	}
	return ""
}

// uriOf returns the URI inside <...> of a name-addr, or the value up to ';'.
func uriOf(v string) string {
	if i := strings.IndexByte(v, '<'); i >= 0 {
		if j := strings.IndexByte(v[i:], '>'); j > 0 {
			return v[i+1 : i+j]
		}
	}
	if i := strings.IndexByte(v, ';'); i >= 0 {
		return strings.TrimSpace(v[:i])
	}
	return strings.TrimSpace(v)
}

// hostPort returns host:port of a sip: URI (port 5060 when absent).
func hostPort(uri string) string {
	u := strings.TrimPrefix(strings.TrimPrefix(uri, "sip:"), "sips:")
	if i := strings.IndexByte(u, '@'); i >= 0 {
		u = u[i+1:]
	}
	if i := strings.IndexAny(u, ";?>"); i >= 0 {
		u = u[:i]
	}
	if strings.HasPrefix(u, "[") {
		if strings.Contains(u, "]:") {
			return u
		}
		return u + ":5060"
	}
	if strings.IndexByte(u, ':') < 0 {
		u += ":5060"
	}
	return u
}

// param returns the value of ;name=value in a header value, or "".
func param(v, name string) string {
	for _, p := range strings.Split(v, ";")[1:] {
		p = strings.TrimSpace(p)
		k, val, _ := strings.Cut(p, "=")
		if strings.EqualFold(k, name) {
			return strings.TrimRight(val, ">")
		}
	}
	return ""
}

// response builds a response to req with code and reason: Vias, From,
// To (with toTag added when set and absent), Call-ID, CSeq, and the extra
// header lines given (each without CRLF).
func response(req *msg, code int, reason, toTag string, extra ...string) []byte {
	var b bytes.Buffer
	b.Grow(512)
	b.WriteString("SIP/2.0 ")
	b.WriteString(itoa(code))
	b.WriteByte(' ')
	b.WriteString(reason)
	b.WriteString("\r\n")
	for _, h := range req.hdrs {
		switch h.name {
		case "via":
			b.WriteString("Via: " + h.value + "\r\n")
		}
	}
	b.WriteString("From: " + req.get("from") + "\r\n")
	to := req.get("to")
	if toTag != "" && param(to, "tag") == "" {
		to += ";tag=" + toTag
	}
	b.WriteString("To: " + to + "\r\n")
	b.WriteString("Call-ID: " + req.get("call-id") + "\r\n")
	b.WriteString("CSeq: " + req.get("cseq") + "\r\n")
	for _, e := range extra {
		b.WriteString(e + "\r\n")
	}
	b.WriteString("Content-Length: 0\r\n\r\n")
	return b.Bytes()
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var d [20]byte
	i := len(d)
	neg := n < 0
	if neg {
		n = -n
	}
	for n > 0 {
		i--
		d[i] = byte('0' + n%10)
		n /= 10
	}
	if neg {
		i--
		d[i] = '-'
	}
	return string(d[i:])
}
