package sip

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"hash"
	"log/slog"
	"sync"
	"sync/atomic"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/config"
)

// A dialog token ties an in-dialog INVITE to a call the proxy forwarded.
// The proxy puts it in the URI of every Record-Route it adds to a forwarded
// initial INVITE (";cg=<token>"); both ends copy those URIs into the Route
// of their in-dialog requests (RFC 3261 12.1), so a genuine re-INVITE brings
// it back. Without it, a peer could send an INVITE with a To tag, a Route
// naming the proxy and a carrier's Request-URI and have it relayed as a
// re-INVITE, past admission and pacing: the carrier counts CPS on INVITE
// arrival, whatever it answers.
//
// The token is the first tokenBytes bytes of HMAC-SHA256(key, Call-ID),
// base64url without padding. The key is sip.dialog_secret, shared by the
// nodes of a pool, or a random key per process when that is empty.

// tokenParam is the Record-Route URI parameter carrying the dialog token.
const tokenParam = "cg"

// tokenBytes is how much of the HMAC a token keeps (96 bits).
const tokenBytes = 12

// tokenKey is one HMAC key with a pool of keyed hashes (hmac.New costs a
// few allocations; a token is minted per forwarded INVITE).
type tokenKey struct {
	pool sync.Pool // of hash.Hash, keyed
}

func newTokenKey(key []byte) *tokenKey {
	k := append([]byte(nil), key...)
	return &tokenKey{pool: sync.Pool{New: func() any { return hmac.New(sha256.New, k) }}}
}

// sum writes the token bytes of callID into dst.
func (k *tokenKey) sum(dst *[sha256.Size]byte, callID string) {
	mac := k.pool.Get().(hash.Hash)
	mac.Reset()
	_, _ = mac.Write([]byte(callID))
	mac.Sum(dst[:0])
	k.pool.Put(mac)
}

// mint returns the token of callID.
func (k *tokenKey) mint(callID string) string {
	var sum [sha256.Size]byte
	k.sum(&sum, callID)
	return base64.RawURLEncoding.EncodeToString(sum[:tokenBytes])
}

// keyState is the keys in use for one value of sip.dialog_secret: the
// current one mints and verifies, the previous one (the key before the last
// change, nil at first) only verifies, so the re-INVITEs of calls set up
// before a reload that changed the secret still pass.
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
			d.log.Info("sip.dialog_secret changed: new dialog tokens use the new key; re-INVITEs of calls set up before are still accepted with the previous one")
			return next
		}
	}
}

// mint returns the dialog token of callID under cfg's secret.
func (d *dialogKeys) mint(cfg *config.Config, callID string) string {
	return d.keys(cfg).cur.mint(callID)
}

// valid reports whether token is the dialog token of callID under the
// current or the previous key (constant-time comparison).
func (d *dialogKeys) valid(cfg *config.Config, callID, token string) bool {
	if callID == "" || base64.RawURLEncoding.DecodedLen(len(token)) != tokenBytes {
		return false
	}
	var got [tokenBytes]byte
	if n, err := base64.RawURLEncoding.Decode(got[:], []byte(token)); err != nil || n != tokenBytes {
		return false
	}
	s := d.keys(cfg)
	var want [sha256.Size]byte
	s.cur.sum(&want, callID)
	ok := hmac.Equal(got[:], want[:tokenBytes])
	if s.prev != nil {
		s.prev.sum(&want, callID)
		ok = hmac.Equal(got[:], want[:tokenBytes]) || ok
	}
	return ok
}

// popOwnRoutesToken is popOwnRoutes for an in-dialog INVITE: it also
// reports whether at least one of the popped Route entries carries a valid
// dialog token for req's Call-ID.
func popOwnRoutesToken(p *Proxy, cfg *config.Config, req *sipmsg.Request) (n int, valid bool) {
	id := callID(req)
	n = popOwnRoutesFunc(p, req, func(u *sipmsg.Uri) {
		if valid || u.UriParams == nil {
			return
		}
		if tok, ok := u.UriParams.Get(tokenParam); ok && p.keys.valid(cfg, id, tok) {
			valid = true
		}
	})
	return n, valid
}
