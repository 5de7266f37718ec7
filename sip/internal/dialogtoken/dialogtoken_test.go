package dialogtoken

import (
	"net/netip"
	"testing"
	"time"
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
	// One byte changed anywhere: refused.
	raw := []byte(tok)
	for i := range raw {
		c := raw[i]
		raw[i] = 'A' + (c+1)%26
		if raw[i] == c {
			raw[i] = 'z'
		}
		if s, ok := Decode(string(raw)); ok {
			if _, ok := k.Open(s, "call-1", "ftag"); ok {
				t.Fatalf("token changed at %d opened", i)
			}
		}
		raw[i] = c
	}
}

// Decode and Open never panic, and open nothing but what Mint made.
func FuzzToken(f *testing.F) {
	k := NewKey([]byte("fuzz"))
	tok, _ := k.Mint(legs, "c", "f", time.Unix(1795670000, 0))
	f.Add(tok, "c", "f")
	f.Add("", "", "")
	f.Add("AwAAAAA", "c", "f")
	f.Fuzz(func(t *testing.T, token, callID, ftag string) {
		s, ok := Decode(token)
		if !ok {
			return
		}
		if got, ok := k.Open(s, callID, ftag); ok && string(Plaintext(got)) == "" {
			t.Fatalf("opened %q to no legs", token)
		}
	})
}
