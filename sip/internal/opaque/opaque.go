package opaque

import (
	"encoding/base32"
	"math/rand/v2"
	"strings"
)

// Alphabet is the 32 characters of Encoding: the digits, the lowercase
// consonants and '_'. No vowel and no capital: no SIP header name can be
// spelled with it, in any case.
const Alphabet = "0123456789bcdfghjklmnpqrstvwxyz_"

// Encoding is base32 over Alphabet, without padding.
var Encoding = base32.NewEncoding(Alphabet).WithPadding(base32.NoPadding)

// valid[c] reports whether c is in Alphabet.
var valid = func() (t [256]bool) {
	for i := 0; i < len(Alphabet); i++ {
		t[Alphabet[i]] = true
	}
	return t
}()

// Valid reports whether s is made of Alphabet's characters only (Encoding's
// decoder would skip a CR or LF, so a value is checked first: one value has
// one text).
func Valid(s string) bool {
	for i := 0; i < len(s); i++ {
		if !valid[s[i]] {
			return false
		}
	}
	return true
}

// Canonical reports whether s is Valid and the one text of the bytes it
// decodes to: the bits of its last character past the last byte are zero
// (Encoding's decoder ignores them, so two texts would name one value).
func Canonical(s string) bool {
	if !Valid(s) {
		return false
	}
	spare := len(s) * 5 % 8 // bits past the last whole byte
	if spare == 0 || spare >= 5 {
		// No spare bit, or a length no byte count encodes to (the
		// decoder refuses it).
		return true
	}
	return strings.IndexByte(Alphabet, s[len(s)-1])&(1<<spare-1) == 0
}

// EncodedLen is the length of n bytes in Encoding.
func EncodedLen(n int) int { return Encoding.EncodedLen(n) }

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
