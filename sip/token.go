package sip

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"hash"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/config"
)

// A dialog token is the proof an in-dialog request needs to be relayed. The
// proxy puts it in the URI of every Record-Route it adds to a forwarded
// initial INVITE (";cg=<token>"); both ends copy those URIs into the Route
// of their in-dialog requests (RFC 3261 12.1), so every genuine in-dialog
// request brings it back.
//
// The token names the two legs the proxy set up for the call, and is
// signed with them:
//
//   - the peer leg: the packet source (IP, port) and transport the initial
//     INVITE came from;
//   - the carrier leg: the address (IP, port) and transport the proxy sent
//     it to;
//   - the call's Call-ID and the caller's From tag (the "ftag" of
//     Kamailio's rr module), which are not carried but go into the MAC.
//
// In-dialog requests from the caller carry that tag in From, requests from
// the callee carry it in To, so the tag also tells the direction: a request
// is relayed only from one leg to the other (never to a host:port that is
// neither), and only when it comes from the leg its direction says. Nothing
// is stored per dialog, so tokens work across restarts and across a pool
// that shares sip.dialog_secret.
//
// Layout, before base64url without padding: version (1 byte, 2), flags (1
// byte: bit 0 peer over TCP, bit 1 carrier over TCP, bit 2 peer over TLS,
// bit 3 carrier over TLS; a leg has one of its two bits at most), the peer
// address and
// the carrier address (each: IP length 4 or 16, the IP, the port big
// endian), then the first tokenMACBytes bytes of
// HMAC-SHA256(key, payload ‖ 0 ‖ Call-ID ‖ 0 ‖ From tag).

// tokenParam is the Record-Route URI parameter carrying the dialog token.
const tokenParam = "cg"

// tokenVersion is the first byte of a token's payload.
const tokenVersion = 2

// tokenMACBytes is how much of the HMAC a token keeps (96 bits).
const tokenMACBytes = 12

// Flags of a token's second byte.
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

// tokenKey is one HMAC key with a pool of keyed hashes (hmac.New costs a
// few allocations; a token is minted per forwarded INVITE).
type tokenKey struct {
	pool sync.Pool // of hash.Hash, keyed
}

func newTokenKey(key []byte) *tokenKey {
	k := append([]byte(nil), key...)
	return &tokenKey{pool: sync.Pool{New: func() any { return hmac.New(sha256.New, k) }}}
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

// payload is the signed part of a token for legs.
func payload(legs dialogLegs) []byte {
	b := make([]byte, 0, 2+2*19)
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
	b = append(b, tokenVersion, flags)
	b = appendLeg(b, legs.peer)
	return appendLeg(b, legs.carrier)
}

// mint returns the token for legs, callID and ftag under k.
func (k *tokenKey) mint(legs dialogLegs, callID, ftag string) string {
	p := payload(legs)
	var sum [sha256.Size]byte
	k.sum(&sum, p, callID, ftag)
	return base64.RawURLEncoding.EncodeToString(append(p, sum[:tokenMACBytes]...))
}

// decodeToken splits a token into its payload, legs and MAC; ok is false
// for anything that is not a well-formed version-2 token.
func decodeToken(token string) (p []byte, legs dialogLegs, mac []byte, ok bool) {
	if len(token) > 128 {
		return nil, dialogLegs{}, nil, false
	}
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil || len(raw) < 2+tokenMACBytes || raw[0] != tokenVersion {
		return nil, dialogLegs{}, nil, false
	}
	flags := raw[1]
	if flags&^(flagPeerTCP|flagCarrierTCP|flagPeerTLS|flagCarrierTLS) != 0 ||
		flags&(flagPeerTCP|flagPeerTLS) == flagPeerTCP|flagPeerTLS ||
		flags&(flagCarrierTCP|flagCarrierTLS) == flagCarrierTCP|flagCarrierTLS {
		return nil, dialogLegs{}, nil, false
	}
	rest := raw[2:]
	var a, b netip.AddrPort
	if a, rest, ok = readLeg(rest); !ok {
		return nil, dialogLegs{}, nil, false
	}
	if b, rest, ok = readLeg(rest); !ok {
		return nil, dialogLegs{}, nil, false
	}
	if len(rest) != tokenMACBytes {
		return nil, dialogLegs{}, nil, false
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
	legs = dialogLegs{
		peer:    legOf(a, flagPeerTCP, flagPeerTLS),
		carrier: legOf(b, flagCarrierTCP, flagCarrierTLS),
	}
	return raw[:len(raw)-tokenMACBytes], legs, rest, true
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
// callID and the caller's From tag ftag, under cfg's secret.
func (d *dialogKeys) mint(cfg *config.Config, legs dialogLegs, callID, ftag string) string {
	return d.keys(cfg).cur.mint(legs, callID, ftag)
}

// direction says which leg sent an in-dialog request.
type direction int

const (
	// fromPeer: the caller's side sent it (its From tag is the call's).
	fromPeer direction = iota + 1
	// fromCarrier: the callee's side sent it (its To tag is the call's).
	fromCarrier
)

// verify checks token against the request's Call-ID and tags, under the
// current or the previous key (constant-time comparison). On success it
// returns the legs and which of them sent the request: fromPeer when the
// MAC holds with fromTag as the call's From tag, fromCarrier when it holds
// with toTag.
func (d *dialogKeys) verify(cfg *config.Config, token, callID, fromTag, toTag string) (dialogLegs, direction, bool) {
	if callID == "" {
		return dialogLegs{}, 0, false
	}
	p, legs, mac, ok := decodeToken(token)
	if !ok {
		return dialogLegs{}, 0, false
	}
	s := d.keys(cfg)
	check := func(k *tokenKey, ftag string) bool {
		if k == nil {
			return false
		}
		var want [sha256.Size]byte
		k.sum(&want, p, callID, ftag)
		return hmac.Equal(mac, want[:tokenMACBytes])
	}
	for _, k := range []*tokenKey{s.cur, s.prev} {
		if check(k, fromTag) {
			return legs, fromPeer, true
		}
		if toTag != fromTag && check(k, toTag) {
			return legs, fromCarrier, true
		}
	}
	return dialogLegs{}, 0, false
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
