package opaque

import (
	"math/rand/v2"
	"strings"
)

// Alphabet is the 32 characters of the text form: the digits, the
// lowercase consonants and '_'. No vowel, no capital and no '-': no full
// SIP header name can be spelled with it, in any case.
const Alphabet = "0123456789bcdfghjklmnpqrstvwxyz_"

// The text form is base32 (RFC 4648: five bits a character, most
// significant first, no padding) over Alphabet. encoding/base32 with this
// alphabet writes the same text, but its decoder made a token's check
// slower than base64url's (BENCHMARKS.md, session 19), skips CR and LF and
// ignores the spare bits of the last character: Decode is strict and runs
// once per in-dialog request.

// invalid marks a byte outside Alphabet in decodeMap.
const invalid = 0xff

// decodeMap maps a character to its five bits, or invalid.
var decodeMap = func() (m [256]byte) {
	for i := range m {
		m[i] = invalid
	}
	for i := 0; i < len(Alphabet); i++ {
		m[Alphabet[i]] = byte(i)
	}
	return m
}()

// EncodedLen is the length of the text of n bytes.
func EncodedLen(n int) int { return (n*8 + 4) / 5 }

// DecodedLen is the most bytes a text of n characters holds.
func DecodedLen(n int) int { return n * 5 / 8 }

// Encode writes the text of src to dst, which must hold
// EncodedLen(len(src)) bytes.
func Encode(dst, src []byte) {
	var acc uint64
	bits, j := 0, 0
	for _, b := range src {
		acc = acc<<8 | uint64(b)
		bits += 8
		for bits >= 5 {
			bits -= 5
			dst[j] = Alphabet[acc>>bits&31]
			j++
		}
	}
	if bits > 0 {
		dst[j] = Alphabet[acc<<(5-bits)&31]
	}
}

// EncodeToString returns the text of src.
func EncodeToString(src []byte) string {
	buf := make([]byte, EncodedLen(len(src)))
	Encode(buf, src)
	return string(buf)
}

// Decode writes the bytes of the text src to dst, which must hold
// DecodedLen(len(src)) bytes, and returns how many. ok is false for a
// character outside Alphabet, a length no byte count encodes to, or a
// spare bit of the last character set: each value has one text.
func Decode(dst []byte, src string) (n int, ok bool) {
	var acc uint64
	bits := 0
	for i := 0; i < len(src); i++ {
		v := decodeMap[src[i]]
		if v == invalid {
			return 0, false
		}
		acc = acc<<5 | uint64(v)
		bits += 5
		if bits >= 8 {
			bits -= 8
			dst[n] = byte(acc >> bits)
			n++
		}
	}
	if bits >= 5 || acc&(1<<bits-1) != 0 {
		return 0, false
	}
	return n, true
}

// DecodeString returns the bytes of the text s (Decode).
func DecodeString(s string) ([]byte, bool) {
	buf := make([]byte, DecodedLen(len(s)))
	n, ok := Decode(buf, s)
	return buf[:n], ok
}

// BranchMagicCookie begins every RFC 3261 branch.
const BranchMagicCookie = "z9hG4bK"

// branchChars is how many random characters Branch draws (80 bits).
const branchChars = 16

// Branch returns a new branch for a Via of the proxy: the magic cookie, a
// '.', then 16 random characters of Alphabet (the form of sipgo's
// GenerateBranchN, whose letters may spell a header name). It is unique,
// not secret: the transaction layer matches on it, nothing trusts it.
func Branch() string {
	var b strings.Builder
	b.Grow(len(BranchMagicCookie) + 1 + branchChars)
	b.WriteString(BranchMagicCookie)
	b.WriteByte('.')
	appendRandom(&b, branchChars)
	return b.String()
}

// Text returns n random characters of Alphabet (5 bits each): a tag or a
// Call-ID of the proxy's own requests. Unique, not secret.
func Text(n int) string {
	var b strings.Builder
	b.Grow(n)
	appendRandom(&b, n)
	return b.String()
}

// appendRandom writes n random characters of Alphabet to b, 12 from each
// 64 random bits.
func appendRandom(b *strings.Builder, n int) {
	var r uint64
	for i := 0; i < n; i++ {
		if i%12 == 0 {
			r = rand.Uint64()
		}
		b.WriteByte(Alphabet[r&31])
		r >>= 5
	}
}
