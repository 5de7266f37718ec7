package sip

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
	"log/slog"
	"math"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	callplaces "github.com/cpsguard/cpsguard/calls"
	"github.com/cpsguard/cpsguard/config"
)

// A dialog token is the proof an in-dialog request needs to be relayed. The
// proxy puts it in the URI of every Record-Route it adds to a forwarded
// initial INVITE (";cg=<token>"); both ends copy those URIs into the Route
// of their in-dialog requests (RFC 3261 12.1), so every genuine in-dialog
// request brings it back.
//
// The token names the two legs the proxy set up for the call, sealed:
//
//   - the peer leg: the packet source (IP, port) and transport the initial
//     INVITE came from;
//   - the carrier leg: the address (IP, port) and transport the proxy sent
//     it to;
//   - the call's Call-ID and the caller's From tag (the "ftag" of
//     Kamailio's rr module), which are not carried but are authenticated
//     with the rest;
//   - when it was minted (its expiry: max_call_duration, see dialogs.go).
//
// In-dialog requests from the caller carry that tag in From, requests from
// the callee carry it in To, so the tag also tells the direction: a request
// is relayed only from one leg to the other (never to a host:port that is
// neither), and only when it comes from the leg its direction says. Nothing
// is stored per dialog to check a token, so tokens work across restarts
// and across a pool that shares sip.dialog_secret.
//
// The legs are encrypted (AES-256-GCM): a peer learns nothing from its
// token, not even which carrier address took its call (wholesale routes
// are confidential, and a spoofed BYE needs that address). Layout, before
// base64url without padding: a header of version (1 byte, 3) and the mint
// time (4 bytes, Unix seconds, big endian), then the GCM nonce (12 random
// bytes), the sealed plaintext and the tag (16 bytes). The plaintext is a
// flags byte (bit 0 peer over TCP, bit 1 carrier over TCP, bit 2 peer
// over TLS, bit 3 carrier over TLS) and the peer
// and carrier addresses (each: IP length 4 or 16, the IP, the port big
// endian). The additional data is the header, then 0, the Call-ID, 0 and
// the caller's From tag (neither holds a NUL: wellFormed). Two IPv4 legs
// make 48 bytes, 64 characters.
//
// The AES key is derived from the secret and the mint day (HKDF-SHA256,
// info tokenKeyInfo and the day number): random 96-bit nonces are safe for
// 2^32 tokens per key (NIST SP 800-38D), and one key per day keeps a pool
// far below that (49,000 calls a second). Tokens of another version, an
// unsealed version-2 token of an older release included, are refused.

// tokenParam is the Record-Route URI parameter carrying the dialog token.
const tokenParam = "cg"

// tokenVersion is the first byte of a token.
const tokenVersion = 3

// tokenHeaderBytes is the clear header of a token: version and mint time.
const tokenHeaderBytes = 1 + 4

// tokenKeyInfo is the HKDF info of a day's token key (the day number
// follows).
const tokenKeyInfo = "cpsguard dialog token v3, day "

// tokenDay is the span one derived token key seals tokens for.
const tokenDay = 24 * time.Hour

// maxDayKeys bounds the derived day keys one secret keeps.
const maxDayKeys = 8

// Flags of a token's plaintext (a leg has one of its two bits at most).
const (
	flagPeerTCP    = 1 << 0
	flagCarrierTCP = 1 << 1
	flagPeerTLS    = 1 << 2
	flagCarrierTLS = 1 << 3
)

// leg is one side of a dialog: where the proxy exchanges its messages.
type leg struct {
	addr netip.AddrPort
	tp   legTransport
}

// legTransport is a leg's transport.
type legTransport uint8

const (
	legUDP legTransport = iota
	legTCP
	legTLS
)

// legTransportOf is sipgo's transport name ("UDP", "TCP", "TLS") as a
// leg's; anything else is UDP.
func legTransportOf(tp string) legTransport {
	switch tp {
	case "TCP":
		return legTCP
	case "TLS":
		return legTLS
	}
	return legUDP
}

// transport is the leg's transport as sipgo names it.
func (l leg) transport() string {
	switch l.tp {
	case legTCP:
		return "TCP"
	case legTLS:
		return "TLS"
	}
	return "UDP"
}

// stream reports a leg over a connection (TCP or TLS), whose writes may
// block.
func (l leg) stream() bool { return l.tp != legUDP }

// dialogLegs are the two legs of a call the proxy forwarded.
type dialogLegs struct {
	peer, carrier leg
}

// tokenKey is what one secret keys: the HMAC of the stateless relay's
// branches (stateless.go), with a pool of keyed hashes (hmac.New costs a
// few allocations), and the dialog tokens' AEAD keys, one per mint day,
// derived on first use. Safe for concurrent use (crypto/cipher's GCM keeps
// no state between calls).
type tokenKey struct {
	secret []byte
	pool   sync.Pool // of hash.Hash, keyed

	mu   sync.Mutex
	days map[int64]cipher.AEAD
}

func newTokenKey(key []byte) *tokenKey {
	k := append([]byte(nil), key...)
	return &tokenKey{secret: k, pool: sync.Pool{New: func() any { return hmac.New(sha256.New, k) }}}
}

// sum writes the MAC of payload, callID and ftag into dst.
func (k *tokenKey) sum(dst *[sha256.Size]byte, payload []byte, callID, ftag string) {
	mac := k.pool.Get().(hash.Hash)
	mac.Reset()
	_, _ = mac.Write(payload)
	_, _ = mac.Write([]byte{0})
	_, _ = mac.Write([]byte(callID))
	_, _ = mac.Write([]byte{0})
	_, _ = mac.Write([]byte(ftag))
	mac.Sum(dst[:0])
	k.pool.Put(mac)
}

// aead returns the token AEAD of mint day day (Unix time / tokenDay),
// deriving it on first use. The cache keeps the maxDayKeys latest days;
// callers only ask for days of tokens not yet expired (verify checks the
// mint time first), so a forged header cannot make it derive keys at will.
func (k *tokenKey) aead(day int64) (cipher.AEAD, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if a, ok := k.days[day]; ok {
		return a, nil
	}
	key, err := hkdf.Key(sha256.New, k.secret, nil, tokenKeyInfo+strconv.FormatInt(day, 10), 32)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	a, err := cipher.NewGCMWithRandomNonce(block)
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

// appendLeg appends a leg's address to b.
func appendLeg(b []byte, l leg) []byte {
	ip := l.addr.Addr().Unmap()
	if ip.Is4() {
		a := ip.As4()
		b = append(b, 4)
		b = append(b, a[:]...)
	} else {
		a := ip.As16()
		b = append(b, 16)
		b = append(b, a[:]...)
	}
	return binary.BigEndian.AppendUint16(b, l.addr.Port())
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

// tokenPlaintext is the sealed part of a token for legs.
func tokenPlaintext(legs dialogLegs) []byte {
	b := make([]byte, 0, 1+2*19)
	var flags byte
	switch legs.peer.tp {
	case legTCP:
		flags |= flagPeerTCP
	case legTLS:
		flags |= flagPeerTLS
	}
	switch legs.carrier.tp {
	case legTCP:
		flags |= flagCarrierTCP
	case legTLS:
		flags |= flagCarrierTLS
	}
	b = append(b, flags)
	b = appendLeg(b, legs.peer)
	return appendLeg(b, legs.carrier)
}

// parseTokenPlaintext reads the legs of an opened token; ok is false for
// anything tokenPlaintext does not make.
func parseTokenPlaintext(b []byte) (legs dialogLegs, ok bool) {
	if len(b) < 1 {
		return dialogLegs{}, false
	}
	flags, rest := b[0], b[1:]
	if flags&^(flagPeerTCP|flagCarrierTCP|flagPeerTLS|flagCarrierTLS) != 0 ||
		flags&(flagPeerTCP|flagPeerTLS) == flagPeerTCP|flagPeerTLS ||
		flags&(flagCarrierTCP|flagCarrierTLS) == flagCarrierTCP|flagCarrierTLS {
		return dialogLegs{}, false
	}
	var a, c netip.AddrPort
	if a, rest, ok = readLeg(rest); !ok {
		return dialogLegs{}, false
	}
	if c, rest, ok = readLeg(rest); !ok || len(rest) != 0 {
		return dialogLegs{}, false
	}
	legOf := func(addr netip.AddrPort, tcp, tls byte) leg {
		l := leg{addr: addr}
		switch {
		case flags&tcp != 0:
			l.tp = legTCP
		case flags&tls != 0:
			l.tp = legTLS
		}
		return l
	}
	return dialogLegs{
		peer:    legOf(a, flagPeerTCP, flagPeerTLS),
		carrier: legOf(c, flagCarrierTCP, flagCarrierTLS),
	}, true
}

// tokenAD is a token's additional data: its header, the Call-ID and the
// caller's From tag.
func tokenAD(header []byte, callID, ftag string) []byte {
	ad := make([]byte, 0, len(header)+2+len(callID)+len(ftag))
	ad = append(ad, header...)
	ad = append(ad, 0)
	ad = append(ad, callID...)
	ad = append(ad, 0)
	return append(ad, ftag...)
}

// mint returns the token for legs, callID and ftag under k, minted at now.
func (k *tokenKey) mint(legs dialogLegs, callID, ftag string, now time.Time) (string, error) {
	secs := now.Unix()
	if secs < 0 || secs > math.MaxUint32 {
		return "", errors.New("sip: dialog token: clock out of range")
	}
	a, err := k.aead(secs / int64(tokenDay/time.Second))
	if err != nil {
		return "", err
	}
	header := []byte{tokenVersion, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(header[1:], uint32(secs))
	raw := a.Seal(header, nil, tokenPlaintext(legs), tokenAD(header, callID, ftag))
	return base64.RawURLEncoding.EncodeToString(raw), nil
}

// maxTokenChars bounds the token a request may carry (two IPv6 legs make
// 96 characters).
const maxTokenChars = 128

// decodeToken splits a token into its header and sealed part and reads its
// mint time; ok is false for anything that is not a version-3 token of a
// possible size.
func decodeToken(token string) (header, sealed []byte, minted time.Time, ok bool) {
	if len(token) > maxTokenChars {
		return nil, nil, time.Time{}, false
	}
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil || len(raw) < tokenHeaderBytes+28+1+2*7 || raw[0] != tokenVersion {
		return nil, nil, time.Time{}, false
	}
	minted = time.Unix(int64(binary.BigEndian.Uint32(raw[1:tokenHeaderBytes])), 0)
	return raw[:tokenHeaderBytes], raw[tokenHeaderBytes:], minted, true
}

// open opens a decoded token under k with callID and ftag; ok is false
// when it does not authenticate or holds no legs.
func (k *tokenKey) open(header, sealed []byte, minted time.Time, callID, ftag string) (dialogLegs, bool) {
	a, err := k.aead(minted.Unix() / int64(tokenDay/time.Second))
	if err != nil {
		return dialogLegs{}, false
	}
	var buf [64]byte
	plain, err := a.Open(buf[:0], nil, sealed, tokenAD(header, callID, ftag))
	if err != nil {
		return dialogLegs{}, false
	}
	return parseTokenPlaintext(plain)
}

// keyState is the keys in use for one value of sip.dialog_secret: the
// current one mints and verifies, the previous one (the key before the last
// change, nil at first) only verifies, so the in-dialog requests of calls
// set up before a reload that changed the secret still pass.
type keyState struct {
	secret    string
	cur, prev *tokenKey
}

// dialogKeys mints and checks dialog tokens. It follows sip.dialog_secret
// across reloads lazily: the first use under a snapshot with another secret
// rotates the keys. Safe for concurrent use.
type dialogKeys struct {
	random *tokenKey // used while sip.dialog_secret is empty
	state  atomic.Pointer[keyState]
	log    *slog.Logger
	// now is the clock tokens are minted and checked at (nil: time.Now;
	// tests set it before use).
	now func() time.Time
}

// newDialogKeys builds the keys with a fresh random key for an empty secret,
// starting from the secret of cfg (nil: none).
func newDialogKeys(cfg *config.Config, log *slog.Logger) (*dialogKeys, error) {
	var rnd [32]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return nil, err
	}
	d := &dialogKeys{random: newTokenKey(rnd[:]), log: log}
	secret := ""
	if cfg != nil {
		secret = cfg.SIP.DialogSecret
	}
	d.state.Store(d.stateFor(secret, nil))
	return d, nil
}

func (d *dialogKeys) stateFor(secret string, prev *tokenKey) *keyState {
	if secret == "" {
		return &keyState{secret: "", cur: d.random, prev: prev}
	}
	return &keyState{secret: secret, cur: newTokenKey([]byte(secret)), prev: prev}
}

// keys returns the key state for cfg's secret, rotating when it changed.
func (d *dialogKeys) keys(cfg *config.Config) *keyState {
	secret := ""
	if cfg != nil {
		secret = cfg.SIP.DialogSecret
	}
	for {
		s := d.state.Load()
		if s.secret == secret {
			return s
		}
		next := d.stateFor(secret, s.cur)
		if d.state.CompareAndSwap(s, next) {
			d.log.Info("sip.dialog_secret changed: new dialog tokens use the new key; in-dialog requests of calls set up before are still accepted with the previous one")
			return next
		}
	}
}

// mint returns the dialog token of a call forwarded over legs, with Call-ID
// callID and the caller's From tag ftag, under cfg's secret, minted now.
func (d *dialogKeys) mint(cfg *config.Config, legs dialogLegs, callID, ftag string) (string, error) {
	return d.keys(cfg).cur.mint(legs, callID, ftag, d.clock())
}

// clock is the time tokens are minted and checked at.
func (d *dialogKeys) clock() time.Time {
	if d.now != nil {
		return d.now()
	}
	return time.Now()
}

// direction says which leg sent an in-dialog request.
type direction int

const (
	// fromPeer: the caller's side sent it (its From tag is the call's).
	fromPeer direction = iota + 1
	// fromCarrier: the callee's side sent it (its To tag is the call's).
	fromCarrier
)

// Token clock bounds. A pool's nodes may disagree on the time (its limits
// run on Redis's clock): a token minted up to tokenSkew in the future is
// taken, and one expires tokenGrace after max_call_duration (a variable:
// tests shorten it).
const tokenSkew = time.Hour

var tokenGrace = 5 * time.Minute

// tokenStatus is what verify makes of a token.
type tokenStatus int

const (
	// tokenBad: not a token of this proxy for this request.
	tokenBad tokenStatus = iota
	// tokenExpired: minted longer ago than max_call_duration allows (its
	// dialog is over; judged from the clear mint time, before the token
	// is opened).
	tokenExpired
	// tokenOK: it opens with the request's Call-ID and tags.
	tokenOK
)

// verify checks token against the request's Call-ID and tags, under the
// current or the previous key. On success it returns the legs and which
// of them sent the request: fromPeer when the token opens with fromTag as
// the call's From tag, fromCarrier when it opens with toTag. A token
// minted more than tokenSkew in the future, or longer ago than
// cfg's max_call_duration and tokenGrace, is refused before any key is
// derived (so a made-up mint time cannot make the proxy derive keys).
func (d *dialogKeys) verify(cfg *config.Config, token, callID, fromTag, toTag string) (dialogLegs, direction, tokenStatus) {
	if callID == "" {
		return dialogLegs{}, 0, tokenBad
	}
	header, sealed, minted, ok := decodeToken(token)
	if !ok {
		return dialogLegs{}, 0, tokenBad
	}
	now := d.clock()
	if minted.After(now.Add(tokenSkew)) {
		return dialogLegs{}, 0, tokenBad
	}
	maxAge := callplaces.DefaultMaxDuration
	if cfg != nil && cfg.SIP.MaxCallDuration > 0 {
		maxAge = cfg.SIP.MaxCallDuration
	}
	if now.Sub(minted) > maxAge+tokenGrace {
		return dialogLegs{}, 0, tokenExpired
	}
	s := d.keys(cfg)
	for _, k := range []*tokenKey{s.cur, s.prev} {
		if k == nil {
			continue
		}
		if legs, ok := k.open(header, sealed, minted, callID, fromTag); ok {
			return legs, fromPeer, tokenOK
		}
		if toTag != fromTag {
			if legs, ok := k.open(header, sealed, minted, callID, toTag); ok {
				return legs, fromCarrier, tokenOK
			}
		}
	}
	return dialogLegs{}, 0, tokenBad
}

// maxRouteTokens bounds how many of the proxy's own Route entries of one
// request have their token checked (a genuine request has one or two).
const maxRouteTokens = 4

// popOwnRoutesTokens is popOwnRoutes for an in-dialog request: it also
// returns the dialog tokens of the popped entries (at most maxRouteTokens).
func popOwnRoutesTokens(p *Proxy, req *sipmsg.Request) (n int, tokens []string) {
	n = popOwnRoutesFunc(p, req, func(u *sipmsg.Uri) {
		if len(tokens) >= maxRouteTokens || u.UriParams == nil {
			return
		}
		if tok, ok := u.UriParams.Get(tokenParam); ok && tok != "" {
			tokens = append(tokens, tok)
		}
	})
	return n, tokens
}
