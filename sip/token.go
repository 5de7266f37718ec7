package sip

import (
	"crypto/rand"
	"log/slog"
	"sync/atomic"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	callplaces "github.com/cpsguard/cpsguard/calls"
	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/sip/internal/dialogtoken"
)

// Dialog tokens (package dialogtoken: the codec and its keys) are the
// proof an in-dialog request needs to be relayed: the proxy puts one in the
// URI of every Record-Route it adds to a forwarded initial INVITE
// (";cg=<token>"), naming the call's two legs, sealed under
// sip.dialog_secret with the Call-ID and the caller's From tag. This file
// holds which secret is in force (dialogKeys: it follows reloads, and the
// previous secret still verifies) and what a token allows a request
// (verify: the direction its tags say, its expiry).

// The token codec's names as this package uses them.
type (
	leg          = dialogtoken.Leg
	dialogLegs   = dialogtoken.Legs
	legTransport = dialogtoken.Transport
	tokenKey     = dialogtoken.Key
)

const (
	tokenParam = dialogtoken.Param
	legUDP     = dialogtoken.UDP
	legTCP     = dialogtoken.TCP
	legTLS     = dialogtoken.TLS
)

// legTransportOf is sipgo's transport name as a leg's.
func legTransportOf(tp string) legTransport { return dialogtoken.TransportOf(tp) }

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
	// nonces makes the nonces of the tokens this proxy mints: their
	// instance part tells its own tokens from a pool's others (minted).
	nonces *dialogtoken.Nonces
	log    *slog.Logger
	// now is the clock tokens are minted and checked at (nil: time.Now;
	// tests set it before use).
	now func() time.Time
	// opaque reports whether the pool reads tokens and stateless branches
	// in opaque text (Options.OpaqueTokens; nil: always). Set before use.
	opaque func() bool
}

// text is how the proxy writes a token or a stateless branch now under
// cfg: opaque text, or base64url while a node of an older release is in
// the pool or when sip.dialog_token_text says so.
func (d *dialogKeys) text(cfg *config.Config) dialogtoken.Text {
	if cfg != nil && cfg.SIP.DialogTokenText == "base64url" {
		return dialogtoken.Base64URL
	}
	if d.opaque == nil || d.opaque() {
		return dialogtoken.Opaque
	}
	return dialogtoken.Base64URL
}

// newDialogKeys builds the keys with a fresh random key for an empty secret,
// starting from the secret of cfg (nil: none).
func newDialogKeys(cfg *config.Config, log *slog.Logger) (*dialogKeys, error) {
	var rnd [32]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return nil, err
	}
	nonces, err := dialogtoken.NewNonces()
	if err != nil {
		return nil, err
	}
	d := &dialogKeys{random: dialogtoken.NewKey(rnd[:]), nonces: nonces, log: log}
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
	return &keyState{secret: secret, cur: dialogtoken.NewKey([]byte(secret)), prev: prev}
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
	return d.keys(cfg).cur.MintNonceAs(d.text(cfg), legs, callID, ftag, d.clock(), d.nonces.Next())
}

// own reports whether a decoded token was minted by this proxy, not by
// another node of the pool or an earlier process.
func (d *dialogKeys) own(s dialogtoken.Sealed) bool { return s.Instance() == d.nonces.Instance() }

// tokenRef is what the proxy keeps of a token that opened: its ID
// (tokensOver) and whether it minted it (ownTokenGone).
type tokenRef struct {
	id  tokenID
	own bool
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
	legs, dir, _, _, st := d.open(cfg, token, callID, fromTag, toTag)
	return legs, dir, st
}

// tokenID names one dialog token (dialogtoken.Sealed.ID): the call
// attempt that minted it (tokensOver).
type tokenID = [dialogtoken.IDBytes]byte

// tokenIDOf returns the ID of a token the proxy minted.
func tokenIDOf(token string) (tokenID, bool) {
	sealed, ok := dialogtoken.Decode(token)
	if !ok {
		return tokenID{}, false
	}
	return sealed.ID(), true
}

// open is verify that also returns when the token was minted (whole
// seconds; zero unless tokenOK or tokenExpired) and, with tokenOK, its ID.
func (d *dialogKeys) open(cfg *config.Config, token, callID, fromTag, toTag string) (dialogLegs, direction, time.Time, tokenRef, tokenStatus) {
	if callID == "" {
		return dialogLegs{}, 0, time.Time{}, tokenRef{}, tokenBad
	}
	sealed, ok := dialogtoken.Decode(token)
	if !ok {
		return dialogLegs{}, 0, time.Time{}, tokenRef{}, tokenBad
	}
	minted := sealed.Minted
	now := d.clock()
	if minted.After(now.Add(tokenSkew)) {
		return dialogLegs{}, 0, time.Time{}, tokenRef{}, tokenBad
	}
	maxAge := callplaces.DefaultMaxDuration
	if cfg != nil && cfg.SIP.MaxCallDuration > 0 {
		maxAge = cfg.SIP.MaxCallDuration
	}
	if now.Sub(minted) > maxAge+tokenGrace {
		return dialogLegs{}, 0, minted, tokenRef{}, tokenExpired
	}
	s := d.keys(cfg)
	for _, k := range []*tokenKey{s.cur, s.prev} {
		if k == nil {
			continue
		}
		if legs, ok := k.Open(sealed, callID, fromTag); ok {
			return legs, fromPeer, minted, tokenRef{sealed.ID(), d.own(sealed)}, tokenOK
		}
		if toTag != fromTag {
			if legs, ok := k.Open(sealed, callID, toTag); ok {
				return legs, fromCarrier, minted, tokenRef{sealed.ID(), d.own(sealed)}, tokenOK
			}
		}
	}
	return dialogLegs{}, 0, time.Time{}, tokenRef{}, tokenBad
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
