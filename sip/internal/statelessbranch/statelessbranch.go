package statelessbranch

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"net/netip"
	"strings"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/sip/internal/dialogtoken"
	"github.com/cpsguard/cpsguard/sip/internal/opaque"
)

// Prefix begins the branch of the proxy's Via on a request relayed
// statelessly. The proxy's stateful branches are the magic cookie and a
// '.' (opaque.Branch, as sipgo's GenerateBranchN), so none of them starts
// with it.
const Prefix = sipmsg.RFC3261BranchMagicCookie + "-cgs-"

// MACBytes is how much of the HMAC a stateless branch keeps (96 bits).
const MACBytes = 12

// KeyBytes is the length of the call key a branch carries (the sip
// package's callKey).
const KeyBytes = 8

// macDomain starts the MAC's input: a dialog token's payload starts with
// its version byte (2), so the two MACs never share an input.
const macDomain = "cgs1"

// Flags of a stateless branch.
const (
	// FromCarrier: the request came from the dialog's carrier leg (its
	// callee's tag is its From tag).
	FromCarrier = 1 << 0
)

// Bytes is a stateless branch's length before encoding: flags, the call
// key, the MAC.
const Bytes = 1 + KeyBytes + MACBytes

// Chars is a stateless branch's length in opaque's text (no padding),
// without its prefix.
const Chars = (Bytes*8 + 4) / 5

// Chars64 is the length of a stateless branch of an earlier release, in
// base64url: a pool's nodes of both releases relay each other's answers
// during an upgrade.
const Chars64 = (Bytes*8 + 5) / 6

// InputBytes sizes the stack buffers Input appends to: enough for a Via
// of a usual length (a longer input grows onto the heap).
const InputBytes = 256

// Branch is a stateless branch's content: the flags and the call key in
// clear (the far leg's response brings them back), and the first
// MACBytes of the MAC over them and Input.
type Branch struct {
	Flags byte
	Key   [KeyBytes]byte
	MAC   [MACBytes]byte
}

// Input is the MAC's input besides the Call-ID (see the package's doc):
// the upstream Via's routing fields, the CSeq and the next hop's IP. Every
// text is length-prefixed and taken byte for byte (no case folding), every
// other field a varint or one presence byte, so
// no two different Vias give one input: a Via whose host or parameters
// hold a separator cannot pass for another that sends the response
// elsewhere. It is appended to b (a caller's stack buffer: InputBytes
// covers the usual input) and returned.
func Input(b []byte, up *sipmsg.ViaHeader, cseq *sipmsg.CSeqHeader, next netip.Addr) []byte {
	field := func(s string) {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	field(macDomain)
	field(up.Transport)
	field(up.Host)
	b = binary.AppendVarint(b, int64(up.Port))
	for _, k := range []string{"branch", "received", "rport"} {
		v, ok := up.Params.Get(k)
		if ok {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
		field(v)
	}
	if cseq != nil {
		b = append(b, 1)
		b = binary.AppendUvarint(b, uint64(cseq.SeqNo))
		field(string(cseq.MethodName))
	} else {
		b = append(b, 0)
	}
	next = next.Unmap().WithZone("")
	if !next.IsValid() {
		field(next.String()) // "invalid IP", as before; AppendTo writes nothing
		return b
	}
	// Addr.AppendTo writes what Addr.String returns, without a string.
	var ip [len("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")]byte
	t := next.AppendTo(ip[:0])
	b = binary.AppendUvarint(b, uint64(len(t)))
	return append(b, t...)
}

// mac is the MAC of a stateless branch under k: in (Input's), then the
// flags and the call key, and the Call-ID id. The three are put together
// in a buffer of its own: appended to in, they went into the spare room
// of the caller's buffer, where two goroutines checking two branches over
// one input would each hash the other's flags and key (h79).
func mac(k *dialogtoken.Key, in []byte, flags byte, key [KeyBytes]byte, id string) (sum [sha256.Size]byte) {
	var buf [InputBytes + 1 + KeyBytes]byte
	b := append(append(append(buf[:0], in...), flags), key[:]...)
	k.Sum(&sum, b, id, "")
	return sum
}

// Seal sets b.MAC to the MAC under k over in (Input's), b's flags and
// key, and the Call-ID callID.
func (b *Branch) Seal(k *dialogtoken.Key, in []byte, callID string) {
	sum := mac(k, in, b.Flags, b.Key, callID)
	copy(b.MAC[:], sum[:MACBytes])
}

// Verify reports whether b.MAC is the MAC under k over in (Input's), b's
// flags and key, and the Call-ID callID (in constant time).
func (b *Branch) Verify(k *dialogtoken.Key, in []byte, callID string) bool {
	want := mac(k, in, b.Flags, b.Key, callID)
	return hmac.Equal(b.MAC[:], want[:MACBytes])
}

// Text is the branch parameter of b: Prefix, then b's bytes (flags, key,
// MAC) in text t (opaque's, or base64url, which a node of an older
// release in the pool reads only).
func (b *Branch) Text(t dialogtoken.Text) string {
	var raw [Bytes]byte
	raw[0] = b.Flags
	copy(raw[1:], b.Key[:])
	copy(raw[1+KeyBytes:], b.MAC[:])
	// The prefix and the encoding built in place: one allocation, the
	// string's.
	var out [len(Prefix) + Chars]byte
	copy(out[:], Prefix)
	if t == dialogtoken.Base64URL {
		base64.RawURLEncoding.Encode(out[len(Prefix):], raw[:])
		return string(out[:len(Prefix)+Chars64])
	}
	opaque.Encode(out[len(Prefix):], raw[:])
	return string(out[:])
}

// Decode decodes the part of a stateless branch after its prefix: exactly
// Chars of opaque's text, or Chars64 of base64url (an earlier release's,
// and this one's while such a node is in the pool), decode to Bytes. The
// two texts of one branch both decode: the MAC binds the bytes, and
// nothing keys on the text. ok is false for anything else, and for flags
// other than FromCarrier.
func Decode(enc string) (b Branch, ok bool) {
	var raw [Bytes]byte
	var n int
	switch len(enc) {
	case Chars:
		n, ok = opaque.Decode(raw[:], enc)
	case Chars64:
		n, ok = dialogtoken.DecodeBase64URL(raw[:], enc)
	}
	if !ok || n != Bytes || raw[0]&^FromCarrier != 0 {
		return Branch{}, false
	}
	b.Flags = raw[0]
	copy(b.Key[:], raw[1:])
	copy(b.MAC[:], raw[1+KeyBytes:])
	return b, true
}

// OnTop reports whether res's top Via is the proxy's on a request it
// relayed statelessly (its branch has Prefix).
func OnTop(res *sipmsg.Response) bool {
	v := res.Via()
	if v == nil {
		return false
	}
	b, _ := v.Params.Get("branch")
	return strings.HasPrefix(b, Prefix)
}
