package opaque

import (
	"bytes"
	"crypto/rand"
	"encoding/base32"
	"strings"
	"testing"
)

// headerNames are the SIP header names of the IANA registry that a
// message of a call may carry, and some common extensions.
var headerNames = []string{
	"Accept", "Accept-Contact", "Accept-Encoding", "Accept-Language", "Accept-Resource-Priority",
	"Alert-Info", "Allow", "Allow-Events", "Answer-Mode", "Authentication-Info", "Authorization",
	"Call-ID", "Call-Info", "Contact", "Content-Disposition", "Content-Encoding", "Content-Language",
	"Content-Length", "Content-Type", "CSeq", "Date", "Diversion", "Error-Info", "Event", "Expires",
	"Feature-Caps", "Flow-Timer", "From", "Geolocation", "History-Info", "Identity", "In-Reply-To",
	"Info-Package", "Join", "Max-Breadth", "Max-Forwards", "MIME-Version", "Min-Expires", "Min-SE",
	"Organization", "P-Asserted-Identity", "P-Preferred-Identity", "Path", "Priority", "Privacy",
	"Proxy-Authenticate", "Proxy-Authorization", "Proxy-Require", "RAck", "Reason", "Record-Route",
	"Recv-Info", "Refer-To", "Referred-By", "Reject-Contact", "Replaces", "Reply-To",
	"Request-Disposition", "Require", "Resource-Priority", "Retry-After", "Route", "RSeq",
	"Security-Client", "Security-Server", "Security-Verify", "Server", "Service-Route",
	"Session-Expires", "Session-ID", "SIP-ETag", "SIP-If-Match", "Subject", "Subscription-State",
	"Supported", "Target-Dialog", "Timestamp", "To", "Unsupported", "User-Agent", "Via", "Warning",
	"WWW-Authenticate",
}

// spellable returns a header name that text in alphabet could hold, in
// any case ("" when none).
func spellable(alphabet string) string {
	for _, name := range headerNames {
		for _, form := range []string{name, strings.ToLower(name), strings.ToUpper(name)} {
			ok := true
			for _, c := range []byte(form) {
				if strings.IndexByte(alphabet, c) < 0 {
					ok = false
					break
				}
			}
			if ok {
				return form
			}
		}
	}
	return ""
}

// Text in Alphabet cannot hold a header name in any case; base64url (the
// form before) can: "CSeq" is how SIPp failed a good call.
func TestNoHeaderName(t *testing.T) {
	if name := spellable(Alphabet); name != "" {
		t.Errorf("Alphabet can spell the header name %q", name)
	}
	const base64url = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	if name := spellable(base64url); name == "" {
		t.Error("the check finds no header name base64url can spell: it checks nothing")
	}
	if strings.ContainsAny(Alphabet, ":;=,<>\"' \t\r\n?&@/%.") {
		t.Errorf("Alphabet %q holds a separator", Alphabet)
	}
}

// reference is encoding/base32 over Alphabet: the text form is standard
// base32 in another alphabet.
var reference = base32.NewEncoding(Alphabet).WithPadding(base32.NoPadding)

// valid reports whether s holds Alphabet's characters only.
func valid(s string) bool {
	for _, c := range []byte(s) {
		if strings.IndexByte(Alphabet, c) < 0 {
			return false
		}
	}
	return true
}

func TestRoundTrip(t *testing.T) {
	for n := 0; n <= 80; n++ {
		b := make([]byte, n)
		_, _ = rand.Read(b)
		s := EncodeToString(b)
		if want := reference.EncodeToString(b); s != want || len(s) != EncodedLen(n) || !valid(s) {
			t.Fatalf("%d bytes: %q (len %d, want %d), encoding/base32 writes %q", n, s, len(s), EncodedLen(n), want)
		}
		got, ok := DecodeString(s)
		if !ok || !bytes.Equal(got, b) {
			t.Fatalf("%d bytes: decoded %x, %v; want %x", n, got, ok, b)
		}
	}
	if EncodedLen(48) != 77 {
		t.Errorf("48 bytes (a token of two IPv4 legs) take %d characters, want 77", EncodedLen(48))
	}
}

// Decode takes what Encode writes and nothing else: no other character,
// no length no byte count encodes to, no second text of the same bytes.
func TestDecodeStrict(t *testing.T) {
	for n := 1; n <= 80; n++ {
		b := make([]byte, n)
		_, _ = rand.Read(b)
		s := EncodeToString(b)
		last := strings.IndexByte(Alphabet, s[len(s)-1])
		for j := 0; j < len(Alphabet); j++ {
			if j == last {
				continue
			}
			other := s[:len(s)-1] + Alphabet[j:j+1]
			if got, err := reference.DecodeString(other); err == nil && bytes.Equal(got, b) {
				if _, ok := DecodeString(other); ok {
					t.Fatalf("%d bytes: %q and %q both decode", n, s, other)
				}
			}
		}
	}
	// Lengths 1, 3 and 6 (mod 8) encode no byte count; "bcdfghk" has a
	// length 4 bytes encode to, with a spare bit set.
	for _, s := range []string{"b", "bcd", "bcdfgh", "bcdfghk", "bc\ndf", "bc\rdf", "BCDF", "bcdfghjk=", "bcdfghjka", "\x00\x00"} {
		if got, ok := DecodeString(s); ok {
			t.Errorf("DecodeString(%q) = %x", s, got)
		}
	}
	if got, ok := DecodeString(""); !ok || len(got) != 0 {
		t.Errorf("DecodeString(\"\") = %x, %v", got, ok)
	}
}

// Decode never panics and takes only Encode's texts.
func FuzzDecode(f *testing.F) {
	f.Add("0kpjln_4c92xxd80")
	f.Add("")
	f.Add("b")
	f.Fuzz(func(t *testing.T, s string) {
		b, ok := DecodeString(s)
		if !ok {
			return
		}
		if EncodeToString(b) != s {
			t.Fatalf("%q decoded to %x, which is written %q", s, b, EncodeToString(b))
		}
	})
}

func TestBranch(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 1000; i++ {
		b := Branch()
		rest, ok := strings.CutPrefix(b, BranchMagicCookie+".")
		if !ok || len(rest) != branchChars || !valid(rest) {
			t.Fatalf("Branch() = %q: want the cookie, '.' and %d characters of Alphabet", b, branchChars)
		}
		if seen[b] {
			t.Fatalf("Branch() repeated %q", b)
		}
		seen[b] = true
	}
}

func TestText(t *testing.T) {
	for _, n := range []int{0, 1, 12, 13, 24, 100} {
		s := Text(n)
		if len(s) != n || !valid(s) {
			t.Fatalf("Text(%d) = %q", n, s)
		}
	}
	// Every character shows up: the draw is not stuck on a few.
	seen := map[byte]bool{}
	for i := 0; i < 200; i++ {
		for _, c := range []byte(Text(24)) {
			seen[c] = true
		}
	}
	if len(seen) != len(Alphabet) {
		t.Errorf("Text drew %d distinct characters in 4,800, want all %d", len(seen), len(Alphabet))
	}
}
