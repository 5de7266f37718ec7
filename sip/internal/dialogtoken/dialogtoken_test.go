package dialogtoken

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/cpsguard/cpsguard/sip/internal/opaque"
)

var legs = Legs{
	Peer:    Leg{Addr: netip.MustParseAddrPort("127.0.0.2:5061"), Proto: TCP},
	Carrier: Leg{Addr: netip.MustParseAddrPort("[2001:db8::5]:5070"), Proto: TLS},
}

// A token opens with its key, Call-ID and From tag only, and gives its legs
// and mint time back.
func TestRoundTrip(t *testing.T) {
	k := NewKey([]byte("secret-0123456789"))
	now := time.Unix(1795670000, 0)
	tok, err := k.Mint(legs, "call-1", "ftag", now)
	if err != nil {
		t.Fatal(err)
	}
	if len(tok) > MaxChars {
		t.Fatalf("token of %d characters, over MaxChars %d", len(tok), MaxChars)
	}
	s, ok := Decode(tok)
	if !ok || !s.Minted.Equal(now) {
		t.Fatalf("Decode: %v, minted %v; want %v", ok, s.Minted, now)
	}
	if got, ok := k.Open(s, "call-1", "ftag"); !ok || got != legs {
		t.Fatalf("Open: %+v, %v; want %+v", got, ok, legs)
	}
	for name, open := range map[string]func() bool{
		"another Call-ID": func() bool { _, ok := k.Open(s, "call-2", "ftag"); return ok },
		"another tag":     func() bool { _, ok := k.Open(s, "call-1", "other"); return ok },
		"another key": func() bool {
			_, ok := NewKey([]byte("other-secret")).Open(s, "call-1", "ftag")
			return ok
		},
		"the zero Sealed": func() bool { _, ok := k.Open(Sealed{}, "call-1", "ftag"); return ok },
	} {
		if open() {
			t.Errorf("%s: opened", name)
		}
	}
	// One character changed anywhere, to any other of the alphabet:
	// refused (the last one's spare bit included: one token, one text).
	raw := []byte(tok)
	for i := range raw {
		c := raw[i]
		for j := 0; j < len(opaque.Alphabet); j++ {
			if raw[i] = opaque.Alphabet[j]; raw[i] == c {
				continue
			}
			if s, ok := Decode(string(raw)); ok {
				if _, ok := k.Open(s, "call-1", "ftag"); ok {
					t.Fatalf("token changed at %d to %q opened", i, raw)
				}
			}
		}
		raw[i] = c
	}
}

// A token is written in opaque's text, which cannot spell a SIP header
// name (SIPp took a "CSeq" inside a base64url token for the response's
// CSeq and failed the call): two IPv4 legs make 77 characters, two IPv6
// legs stay under MaxChars.
func TestTokenText(t *testing.T) {
	k := NewKey([]byte("secret-0123456789"))
	now := time.Unix(1795670000, 0)
	v4 := Legs{Peer: Leg{Addr: netip.MustParseAddrPort("127.0.0.2:5061")}, Carrier: Leg{Addr: netip.MustParseAddrPort("127.0.0.1:5070")}}
	v6 := Legs{Peer: Leg{Addr: netip.MustParseAddrPort("[2001:db8::1]:5061")}, Carrier: Leg{Addr: netip.MustParseAddrPort("[2001:db8::5]:5070")}}
	for _, c := range []struct {
		legs  Legs
		chars int
	}{{v4, 77}, {v6, 116}} {
		for i := 0; i < 200; i++ {
			tok, err := k.Mint(c.legs, "call-1", "ftag", now)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := opaque.DecodeString(tok); !ok || len(tok) != c.chars || len(tok) > MaxChars {
				t.Fatalf("token %q: want %d characters of opaque.Alphabet", tok, c.chars)
			}
		}
	}
	// The version tells the text: version-4 bytes in base64url, or
	// version-3 bytes in opaque's text, are nobody's token.
	tok, _ := k.Mint(v4, "call-1", "ftag", now)
	raw, ok := opaque.DecodeString(tok)
	if !ok {
		t.Fatalf("token %q is not opaque's text", tok)
	}
	if _, ok := Decode(base64.RawURLEncoding.EncodeToString(raw)); ok {
		t.Error("a version-4 token in base64url decoded")
	}
	raw[0] = versionBase64
	if _, ok := Decode(opaque.EncodeToString(raw)); ok {
		t.Error("a version-3 token in opaque's text decoded")
	}
	// Minted as Base64URL (a pool with older nodes): version 3 in
	// base64url, which opens as any token does.
	old, err := k.MintNonceAs(Base64URL, v4, "call-1", "ftag", now, testNonces(t).Next())
	if err != nil {
		t.Fatal(err)
	}
	raw64, err := base64.RawURLEncoding.DecodeString(old)
	if err != nil || raw64[0] != versionBase64 || len(old) != 64 {
		t.Fatalf("Base64URL token %q: %v, want 64 characters of base64url, version 3", old, err)
	}
	s, ok := Decode(old)
	if !ok {
		t.Fatal("Decode refused a Base64URL token")
	}
	if got, ok := k.Open(s, "call-1", "ftag"); !ok || got != v4 {
		t.Fatalf("Open of a Base64URL token: %+v, %v; want %+v", got, ok, v4)
	}
}

// testNonces is NewNonces for a test.
func testNonces(t *testing.T) *Nonces {
	ns, err := NewNonces()
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

// Tokens minted with a process's Nonces carry its instance part, never
// share a nonce or an ID, and open as any token does; a token of another
// process (or a random nonce) does not carry the instance.
func TestNoncesInstance(t *testing.T) {
	k := NewKey([]byte("secret-0123456789"))
	now := time.Unix(1795670000, 0)
	a, err := NewNonces()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewNonces()
	if a.Instance() == b.Instance() {
		t.Fatalf("two processes drew the instance %x", a.Instance())
	}
	ids := map[[IDBytes]byte]bool{}
	for i := range 1000 {
		tok, err := k.MintNonce(legs, "call-"+strconv.Itoa(i), "ftag", now, a.Next())
		if err != nil {
			t.Fatal(err)
		}
		s, ok := Decode(tok)
		if !ok || s.Instance() != a.Instance() {
			t.Fatalf("token %d: instance %x, want %x", i, s.Instance(), a.Instance())
		}
		if got, ok := k.Open(s, "call-"+strconv.Itoa(i), "ftag"); !ok || got != legs {
			t.Fatalf("token %d: Open %+v, %v", i, got, ok)
		}
		if ids[s.ID()] {
			t.Fatalf("token %d: ID %x seen before", i, s.ID())
		}
		ids[s.ID()] = true
	}
	tok, _ := k.MintNonce(legs, "call-b", "ftag", now, b.Next())
	if s, _ := Decode(tok); s.Instance() == a.Instance() {
		t.Errorf("another process's token carries this one's instance")
	}
	tok, _ = k.Mint(legs, "call-r", "ftag", now)
	if s, _ := Decode(tok); s.Instance() == a.Instance() {
		t.Errorf("a random nonce carries the instance (a 2^-32 chance)")
	}
}

// A token minted before nonces had an instance part (GCM with a random
// nonce written ahead, NewGCMWithRandomNonce), and before tokens were
// written in opaque's text (version 3, base64url), still opens: a
// rolling upgrade keeps the calls it finds.
func TestTokenOfTheRandomNonceLayoutOpens(t *testing.T) {
	secret := []byte("secret-0123456789")
	now := time.Unix(1795670000, 0)
	day := now.Unix() / int64(Day/time.Second)
	key, err := hkdf.Key(sha256.New, secret, nil, keyInfo+strconv.FormatInt(day, 10), 32)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := aes.NewCipher(key)
	old, err := cipher.NewGCMWithRandomNonce(block)
	if err != nil {
		t.Fatal(err)
	}
	header := []byte{versionBase64, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(header[1:], uint32(now.Unix()))
	tok := base64.RawURLEncoding.EncodeToString(old.Seal(header, nil, Plaintext(legs), additionalData(header, "call-1", "ftag")))
	s, ok := Decode(tok)
	if !ok {
		t.Fatal("Decode refused the old layout")
	}
	if got, ok := NewKey(secret).Open(s, "call-1", "ftag"); !ok || got != legs {
		t.Fatalf("Open of the old layout: %+v, %v; want %+v", got, ok, legs)
	}
}

// Decode and Open never panic, and open nothing but what Mint made: the
// two tokens minted (one per text), with their Call-ID and From tag.
func FuzzToken(f *testing.F) {
	k := NewKey([]byte("fuzz"))
	now := time.Unix(1795670000, 0)
	// Fixed nonces: the fuzzing workers mint the same tokens as the
	// process that wrote the seeds.
	tok, _ := k.MintNonceAs(Opaque, legs, "c", "f", now, [NonceBytes]byte{1})
	tok3, _ := k.MintNonceAs(Base64URL, legs, "c", "f", now, [NonceBytes]byte{2})
	f.Add(tok, "c", "f")
	f.Add(tok3, "c", "f")
	f.Add(tok3[:10]+"\n"+tok3[10:], "c", "f")
	f.Add("", "", "")
	f.Add("AwAAAAA", "c", "f")
	f.Fuzz(func(t *testing.T, token, callID, ftag string) {
		s, ok := Decode(token)
		if !ok {
			return
		}
		if got, ok := k.Open(s, callID, ftag); ok && (got != legs || token != tok && token != tok3 || callID != "c" || ftag != "f") {
			t.Fatalf("opened %q (Call-ID %q, tag %q) to %+v: not a token minted", token, callID, ftag, got)
		}
	})
}

// A version-3 token with a CR or LF inside is refused (encoding/base64
// skips them): one token, one text.
func TestBase64TokenWithLineBreakRefused(t *testing.T) {
	k := NewKey([]byte("secret-0123456789"))
	tok, err := k.MintNonceAs(Base64URL, legs, "call-1", "ftag", time.Unix(1795670000, 0), testNonces(t).Next())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := Decode(tok); !ok {
		t.Fatal("the genuine version-3 token is refused")
	}
	for _, ins := range []string{"\n", "\r\n", "\r\r\r\r\r\r\r\r"} {
		if _, ok := Decode(tok[:20] + ins + tok[20:]); ok {
			t.Errorf("a version-3 token with %q inside decoded", ins)
		}
	}
}

// BenchmarkDecode prices Decode of a token of two IPv4 legs in opaque's
// text (version 4) against the same bytes in base64url (version 3, the
// releases before), in one run.
func BenchmarkDecode(b *testing.B) {
	k := NewKey([]byte("secret-0123456789"))
	v4 := Legs{Peer: Leg{Addr: netip.MustParseAddrPort("127.0.0.2:5061")}, Carrier: Leg{Addr: netip.MustParseAddrPort("127.0.0.1:5070")}}
	tok, err := k.Mint(v4, "call-1", "ftag", time.Unix(1795670000, 0))
	if err != nil {
		b.Fatal(err)
	}
	raw, _ := opaque.DecodeString(tok)
	raw[0] = versionBase64
	old := base64.RawURLEncoding.EncodeToString(raw)
	for _, c := range []struct{ name, tok string }{{"opaque", tok}, {"base64url", old}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := Decode(c.tok); !ok {
					b.Fatal("refused")
				}
			}
		})
	}
}
