package dialogtoken

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"hash"
	"math"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cpsguard/cpsguard/sip/internal/opaque"
)

// Param is the Record-Route URI parameter carrying the dialog token.
const Param = "cg"

// version is the first byte of a token: its text is opaque's.
const version = 4

// versionBase64 is the first byte of a token in base64url, the same
// layout: earlier releases' (calls set up before an upgrade still open),
// and this one's while such a release runs in the pool (Base64URL).
const versionBase64 = 3

// headerBytes is the clear header of a token: version and mint time.
const headerBytes = 1 + 4

// keyInfo is the HKDF info of a day's token key (the day number
// follows).
const keyInfo = "cpsguard dialog token v3, day "

// Day is the span one derived token key seals tokens for.
const Day = 24 * time.Hour

// maxDayKeys bounds the derived day keys one secret keeps.
const maxDayKeys = 8

// Flags of a token's plaintext (a Leg has one of its two bits at most).
const (
	flagPeerTCP    = 1 << 0
	flagCarrierTCP = 1 << 1
	flagPeerTLS    = 1 << 2
	flagCarrierTLS = 1 << 3
)

// Leg is one side of a dialog: where the proxy exchanges its messages.
type Leg struct {
	Addr  netip.AddrPort
	Proto Transport
}

// Transport is a leg's transport.
type Transport uint8

const (
	UDP Transport = iota
	TCP
	TLS
)

// TransportOf is sipgo's transport name ("UDP", "TCP", "TLS") as a
// leg's; anything else is UDP.
func TransportOf(tp string) Transport {
	switch tp {
	case "TCP":
		return TCP
	case "TLS":
		return TLS
	}
	return UDP
}

// Name is the leg's Name as sipgo names it.
func (l Leg) Name() string {
	switch l.Proto {
	case TCP:
		return "TCP"
	case TLS:
		return "TLS"
	}
	return "UDP"
}

// Stream reports a Leg over a connection (TCP or TLS), whose writes may
// block.
func (l Leg) Stream() bool { return l.Proto != UDP }

// Legs are the two legs of a call the proxy forwarded.
type Legs struct {
	Peer, Carrier Leg
}

// Key is what one secret keys: the HMAC of the stateless relay's
// branches (the sip package's stateless relay), with a pool of keyed hashes (hmac.New costs a
// few allocations), and the dialog tokens' AEAD keys, one per mint day,
// derived on first use. Safe for concurrent use (crypto/cipher's GCM keeps
// no state between calls).
type Key struct {
	secret []byte
	pool   sync.Pool // of *macState, keyed

	mu   sync.Mutex
	days map[int64]cipher.AEAD
}

func NewKey(key []byte) *Key {
	k := append([]byte(nil), key...)
	return &Key{secret: k, pool: sync.Pool{New: func() any { return &macState{mac: hmac.New(sha256.New, k)} }}}
}

// macState is one pooled keyed hash with the scratch space Sum needs, so
// that nothing it writes or sums escapes to the heap: bytes handed to a
// hash.Hash (an interface) do, and each would cost an allocation.
type macState struct {
	mac hash.Hash
	in  []byte
	sum [sha256.Size]byte
}

// maxPooledInput bounds the scratch input a pooled macState keeps (a
// longer one, from an oversized Call-ID, is dropped with its state).
const maxPooledInput = 1024

// Sum writes the MAC of payload, callID and ftag (each separated by a zero
// byte) into dst.
func (k *Key) Sum(dst *[sha256.Size]byte, payload []byte, callID, ftag string) {
	s := k.pool.Get().(*macState)
	s.mac.Reset()
	s.in = append(append(append(append(append(s.in[:0], payload...), 0), callID...), 0), ftag...)
	_, _ = s.mac.Write(s.in)
	*dst = [sha256.Size]byte(s.mac.Sum(s.sum[:0]))
	if cap(s.in) <= maxPooledInput {
		k.pool.Put(s)
	}
}

// aead returns the token AEAD of mint day day (Unix time / Day),
// deriving it on first use. The cache keeps the maxDayKeys latest days;
// callers only ask for days of tokens not yet expired (they check
// Sealed.Minted first), so a forged header cannot make it derive keys at will.
func (k *Key) aead(day int64) (cipher.AEAD, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if a, ok := k.days[day]; ok {
		return a, nil
	}
	key, err := hkdf.Key(sha256.New, k.secret, nil, keyInfo+strconv.FormatInt(day, 10), 32)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	// Plain GCM, its 12-byte nonce written ahead of the ciphertext as
	// NewGCMWithRandomNonce does (the layout of the tokens minted before
	// nonces had an instance part): Mint chooses the nonce.
	a, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	if k.days == nil {
		k.days = make(map[int64]cipher.AEAD)
	}
	if len(k.days) >= maxDayKeys {
		oldest := day
		for d := range k.days {
			oldest = min(oldest, d)
		}
		delete(k.days, oldest)
	}
	if len(k.days) < maxDayKeys {
		k.days[day] = a
	}
	return a, nil
}

// AppendLeg appends a leg's address to b.
func AppendLeg(b []byte, l Leg) []byte {
	ip := l.Addr.Addr().Unmap()
	if ip.Is4() {
		a := ip.As4()
		b = append(b, 4)
		b = append(b, a[:]...)
	} else {
		a := ip.As16()
		b = append(b, 16)
		b = append(b, a[:]...)
	}
	return binary.BigEndian.AppendUint16(b, l.Addr.Port())
}

// readLeg reads a leg's address from b and returns the rest.
func readLeg(b []byte) (netip.AddrPort, []byte, bool) {
	if len(b) < 1 {
		return netip.AddrPort{}, nil, false
	}
	n := int(b[0])
	if (n != 4 && n != 16) || len(b) < 1+n+2 {
		return netip.AddrPort{}, nil, false
	}
	ip, ok := netip.AddrFromSlice(b[1 : 1+n])
	if !ok {
		return netip.AddrPort{}, nil, false
	}
	port := binary.BigEndian.Uint16(b[1+n:])
	return netip.AddrPortFrom(ip, port), b[1+n+2:], true
}

// Plaintext is the sealed part of a token for legs.
func Plaintext(legs Legs) []byte {
	b := make([]byte, 0, 1+2*19)
	var flags byte
	switch legs.Peer.Proto {
	case TCP:
		flags |= flagPeerTCP
	case TLS:
		flags |= flagPeerTLS
	}
	switch legs.Carrier.Proto {
	case TCP:
		flags |= flagCarrierTCP
	case TLS:
		flags |= flagCarrierTLS
	}
	b = append(b, flags)
	b = AppendLeg(b, legs.Peer)
	return AppendLeg(b, legs.Carrier)
}

// ParsePlaintext reads the legs of an opened token; ok is false for
// anything Plaintext does not make.
func ParsePlaintext(b []byte) (legs Legs, ok bool) {
	if len(b) < 1 {
		return Legs{}, false
	}
	flags, rest := b[0], b[1:]
	if flags&^(flagPeerTCP|flagCarrierTCP|flagPeerTLS|flagCarrierTLS) != 0 ||
		flags&(flagPeerTCP|flagPeerTLS) == flagPeerTCP|flagPeerTLS ||
		flags&(flagCarrierTCP|flagCarrierTLS) == flagCarrierTCP|flagCarrierTLS {
		return Legs{}, false
	}
	var a, c netip.AddrPort
	if a, rest, ok = readLeg(rest); !ok {
		return Legs{}, false
	}
	if c, rest, ok = readLeg(rest); !ok || len(rest) != 0 {
		return Legs{}, false
	}
	legOf := func(addr netip.AddrPort, tcp, tls byte) Leg {
		l := Leg{Addr: addr}
		switch {
		case flags&tcp != 0:
			l.Proto = TCP
		case flags&tls != 0:
			l.Proto = TLS
		}
		return l
	}
	return Legs{
		Peer:    legOf(a, flagPeerTCP, flagPeerTLS),
		Carrier: legOf(c, flagCarrierTCP, flagCarrierTLS),
	}, true
}

// additionalData is a token's additional data: its header, the Call-ID and the
// caller's From tag.
func additionalData(header []byte, callID, ftag string) []byte {
	ad := make([]byte, 0, len(header)+2+len(callID)+len(ftag))
	ad = append(ad, header...)
	ad = append(ad, 0)
	ad = append(ad, callID...)
	ad = append(ad, 0)
	return append(ad, ftag...)
}

// Mint returns the token for legs, callID and ftag under k, minted at now,
// with a random nonce.
func (k *Key) Mint(legs Legs, callID, ftag string, now time.Time) (string, error) {
	var nonce [NonceBytes]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return "", err
	}
	return k.MintNonce(legs, callID, ftag, now, nonce)
}

// NonceBytes is the length of a token's GCM nonce.
const NonceBytes = 12

// InstanceBytes is the length of the instance part of a nonce
// (Nonces.Next): the first bytes, which name the minting process.
const InstanceBytes = 4

// MintNonce is Mint with the GCM nonce given: it must never repeat under
// one key (Nonces makes such nonces).
func (k *Key) MintNonce(legs Legs, callID, ftag string, now time.Time, nonce [NonceBytes]byte) (string, error) {
	return k.MintNonceAs(Opaque, legs, callID, ftag, now, nonce)
}

// Text is how a token is written.
type Text uint8

const (
	// Opaque is version 4 in opaque's text: no header name inside.
	Opaque Text = iota
	// Base64URL is version 3 in base64url, the only form releases before
	// Opaque read: for a pool where such a node still runs. Its text can
	// hold a header name (SIPp fails about one call in 275,000 on it).
	Base64URL
)

// MintNonceAs is MintNonce written as t.
func (k *Key) MintNonceAs(t Text, legs Legs, callID, ftag string, now time.Time, nonce [NonceBytes]byte) (string, error) {
	secs := now.Unix()
	if secs < 0 || secs > math.MaxUint32 {
		return "", errors.New("dialogtoken: clock out of range")
	}
	a, err := k.aead(secs / int64(Day/time.Second))
	if err != nil {
		return "", err
	}
	raw := make([]byte, headerBytes, headerBytes+NonceBytes+64)
	raw[0] = version
	if t == Base64URL {
		raw[0] = versionBase64
	}
	binary.BigEndian.PutUint32(raw[1:], uint32(secs))
	raw = append(raw, nonce[:]...)
	raw = a.Seal(raw, nonce[:], Plaintext(legs), additionalData(raw[:headerBytes], callID, ftag))
	if t == Base64URL {
		return base64.RawURLEncoding.EncodeToString(raw), nil
	}
	return opaque.EncodeToString(raw), nil
}

// Nonces makes the GCM nonces of one minting process: a random instance
// part (InstanceBytes) drawn once, then a counter (NIST SP 800-38D 8.2.1,
// the deterministic construction: no nonce repeats while the counter does
// not wrap, where random 96-bit nonces are safe for 2^32 tokens a key).
// The instance part tells the process its own tokens (Sealed.Instance).
// Safe for concurrent use.
type Nonces struct {
	instance [InstanceBytes]byte
	n        atomic.Uint64
}

// NewNonces draws an instance part.
func NewNonces() (*Nonces, error) {
	ns := &Nonces{}
	if _, err := rand.Read(ns.instance[:]); err != nil {
		return nil, err
	}
	return ns, nil
}

// Instance is the instance part of the nonces ns makes.
func (ns *Nonces) Instance() [InstanceBytes]byte { return ns.instance }

// Next returns a nonce never returned before by ns.
func (ns *Nonces) Next() (nonce [NonceBytes]byte) {
	copy(nonce[:], ns.instance[:])
	binary.BigEndian.PutUint64(nonce[InstanceBytes:], ns.n.Add(1))
	return nonce
}

// MaxChars bounds the token a request may carry (two IPv6 legs make
// 116 characters).
const MaxChars = 128

// Sealed is a decoded token not yet opened: its clear header, with the
// mint time, and its sealed part.
type Sealed struct {
	header, body []byte
	// Minted is when the token was minted (whole seconds).
	Minted time.Time
}

// Decode splits a token into its header and sealed part and reads its
// mint time; ok is false for anything that is not a token of a possible
// size: version 4 in opaque's text, or version 3 (an earlier release's)
// in base64url. Nothing is checked cryptographically: check Minted before
// Open, so a made-up mint time cannot make a Key derive day keys.
func Decode(token string) (Sealed, bool) {
	if len(token) > MaxChars {
		return Sealed{}, false
	}
	raw, ok := decodeAs(token, version)
	if !ok {
		// Not version 4 in opaque's text: perhaps an earlier release's
		// (every version-3 token starts with 'A', outside opaque's
		// alphabet).
		if raw, ok = decodeAs(token, versionBase64); !ok {
			return Sealed{}, false
		}
	}
	minted := time.Unix(int64(binary.BigEndian.Uint32(raw[1:headerBytes])), 0)
	return Sealed{header: raw[:headerBytes], body: raw[headerBytes:], Minted: minted}, true
}

// base64Strict is base64url that refuses spare bits set (but skips CR and
// LF: DecodeBase64URL refuses those first).
var base64Strict = base64.RawURLEncoding.Strict()

// DecodeBase64URL decodes src, base64url without padding as earlier
// releases wrote tokens and stateless branches, into dst (at least
// base64.RawURLEncoding.DecodedLen(len(src)) bytes), refusing what
// encoding/base64 would let through: spare bits set, CR or LF anywhere.
// Each value has one text.
func DecodeBase64URL(dst []byte, src string) (int, bool) {
	if strings.ContainsAny(src, "\r\n") {
		return 0, false
	}
	n, err := base64Strict.Decode(dst, []byte(src))
	return n, err == nil
}

// decodeAs decodes token as a token of version v (4: opaque's text, 3:
// base64url) of a possible size.
func decodeAs(token string, v byte) ([]byte, bool) {
	var raw []byte
	ok := false
	if v == version {
		raw, ok = opaque.DecodeString(token)
	} else {
		raw = make([]byte, base64.RawURLEncoding.DecodedLen(len(token)))
		var n int
		n, ok = DecodeBase64URL(raw, token)
		raw = raw[:n]
	}
	return raw, ok && len(raw) >= headerBytes+28+1+2*7 && raw[0] == v
}

// IDBytes is the length of a token's ID.
const IDBytes = 8

// ID names the token: the first IDBytes of the SHA-256 of its nonce, which
// no other token of a key shares (Mint draws it at random, Nonces counts)
// and the AEAD authenticates (once Open succeeded, no other token has this
// ID but by a 64-bit chance). Nonces of different processes differ in
// their instance part, so IDs are unique across a pool too.
func (s Sealed) ID() (id [IDBytes]byte) {
	sum := sha256.Sum256(s.body[:min(len(s.body), NonceBytes)])
	copy(id[:], sum[:])
	return id
}

// Instance is the instance part of the token's nonce (Nonces): a process
// that minted it with its Nonces finds its own Instance here.
func (s Sealed) Instance() (in [InstanceBytes]byte) {
	copy(in[:], s.body)
	return in
}

// Open opens a decoded token under k with callID and ftag; ok is false
// when it does not authenticate or holds no legs.
func (k *Key) Open(s Sealed, callID, ftag string) (Legs, bool) {
	if len(s.header) != headerBytes {
		return Legs{}, false
	}
	a, err := k.aead(s.Minted.Unix() / int64(Day/time.Second))
	if err != nil {
		return Legs{}, false
	}
	if len(s.body) < NonceBytes {
		return Legs{}, false
	}
	var buf [64]byte
	plain, err := a.Open(buf[:0], s.body[:NonceBytes], s.body[NonceBytes:], additionalData(s.header, callID, ftag))
	if err != nil {
		return Legs{}, false
	}
	return ParsePlaintext(plain)
}
