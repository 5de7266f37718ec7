package sip

import (
	"errors"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/emiago/sipgo"
	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/metrics"
)

// The screen is the proxy's first look at every parsed message, before
// sipgo's transaction layer creates any state for it. It runs in the
// transport's read loop, so it only does cheap, non-blocking work:
//
//   - strangers (a source that is neither a peer's nor a carrier's) cost
//     nothing: with unknown_source drop they get silence, with reject one
//     stateless 403 (requests other than ACK); their responses are dropped;
//   - a request or response without Via, From, To, Call-ID or CSeq, with a
//     CSeq method other than the request's, with an empty tag, or with two
//     of a header that may appear once (oneEach), is never used: requests
//     get a stateless 400, responses are dropped;
//   - out-of-dialog requests other than INVITE, ACK and CANCEL from known
//     parties are answered here, statelessly (OPTIONS 200, or 503 while
//     draining or while the store cannot decide; anything else 405);
//   - a CANCEL of a call in progress must come from the source its INVITE
//     came from (sipgo matches a CANCEL by Via branch and sent-by only, so a
//     stranger who saw the branch could cancel someone's call); it is
//     answered 200 here and the call is told, which then cancels the
//     carrier's leg and relays the carrier's answer (RFC 3261 16.10).
//
// sipgo v1.7.2 offers no hook between parsing and the transaction layer:
// the transport layer calls a list of handlers, the transaction layer's
// first. installScreen wraps that list once, before any listener is
// served, so the screen decides what the transaction layer sees. It reads
// an unexported field by reflection; if a sipgo upgrade renames it, New
// fails with an error (and TestScreenInstalled fails), never silently.

// installScreen puts screen in front of the handlers of tp: a message
// reaches them only when screen returns true.
//
// It returns the handlers the screen guards (the transaction layer's), for
// the UDP workers, which run the screen themselves (ingress.go).
func installScreen(tp *sipmsg.TransportLayer, screen func(sipmsg.Message) bool) ([]sipmsg.MessageHandler, error) {
	f := reflect.ValueOf(tp).Elem().FieldByName("handlers")
	if !f.IsValid() || f.Type() != reflect.TypeFor[[]sipmsg.MessageHandler]() {
		return nil, errors.New("sip: sipgo's transport layer has no handler list to screen (sipgo changed?)")
	}
	f = reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
	next := slices.Clone(f.Interface().([]sipmsg.MessageHandler))
	if len(next) == 0 {
		return nil, errors.New("sip: sipgo's transport layer has no handler to screen")
	}
	screened := func(m sipmsg.Message) {
		if screen(m) {
			for _, h := range next {
				h(m)
			}
		}
	}
	f.Set(reflect.ValueOf([]sipmsg.MessageHandler{screened}))
	return next, nil
}

// screen decides whether sipgo's transaction layer sees m. A panic drops
// the message (counted in cpsguard_panics_total{where="sip.screen"}).
func (p *Proxy) screen(m sipmsg.Message) (pass bool) {
	defer p.panics.Recover("sip.screen", func(error) { pass = false })
	switch m := m.(type) {
	case *sipmsg.Request:
		return p.screenRequest(m)
	case *sipmsg.Response:
		return p.screenResponse(m)
	}
	return false
}

func (p *Proxy) screenRequest(req *sipmsg.Request) bool {
	cfg := p.cfg()
	if cfg == nil {
		return false
	}
	src, ok := sourceAddr(req)
	if !ok {
		p.m.SIPErrors.WithLabelValues("source").Inc()
		return false
	}
	if !p.knownSource(cfg, src) {
		p.m.SIPErrors.WithLabelValues("unknown_source").Inc()
		if req.IsInvite() && !hasToTag(req) {
			p.m.Calls.WithLabelValues(PeerUnknown, metrics.OutcomeRejectedForbidden).Inc()
		}
		if cfg.SIP.UnknownSource != "drop" && !req.IsAck() && req.Via() != nil {
			p.stateless(req, sipmsg.StatusForbidden, "Forbidden")
		}
		return false
	}
	if !wellFormed(req) {
		p.m.SIPErrors.WithLabelValues("malformed").Inc()
		if !req.IsAck() && req.Via() != nil {
			p.stateless(req, sipmsg.StatusBadRequest, "Bad Request")
		}
		return false
	}
	switch {
	case req.IsCancel():
		return p.screenCancel(req)
	case req.IsInvite():
		if tagOf(req.From().Params) == "" && !p.inDialog(req) {
			// RFC 3261 8.1.1.3: a UAC puts a tag in From. A call without one
			// has no dialog the carrier's BYE could name (it has no To tag
			// then, and is refused), so it would hold its max_calls places
			// until max_call_duration.
			p.m.SIPErrors.WithLabelValues("malformed").Inc()
			p.stateless(req, sipmsg.StatusBadRequest, "Bad Request: From tag missing")
			return false
		}
		return p.screenInvite(cfg, req, src)
	case req.IsAck() && shedAck(req):
		return false
	case req.IsAck():
		// An ACK of a 2xx over UDP: relayed from here, in order with the
		// BYE that may follow (stateless.go).
		return !p.screenAck(req)
	case p.inDialog(req):
		// In-dialog non-INVITE over UDP: relayed from here (stateless.go).
		return !p.screenInDialog(cfg, req)
	}
	peer := ""
	if pe := cfg.PeerByAddr(src); pe != nil && !p.isCarrierAddr(cfg, src) {
		peer = pe.Name
	}
	p.answerOutOfDialog(req, peer)
	return false
}

func (p *Proxy) screenResponse(res *sipmsg.Response) bool {
	src, err := netip.ParseAddrPort(res.Source())
	if err != nil || !p.knownSource(p.cfg(), src.Addr().Unmap()) {
		p.m.SIPErrors.WithLabelValues("unknown_source").Inc()
		return false
	}
	if !wellFormed(res) {
		p.m.SIPErrors.WithLabelValues("malformed").Inc()
		return false
	}
	if statelessBranchOf(res) {
		// No transaction of sipgo's: relayed or dropped here (stateless.go).
		p.relayStatelessResponse(p.cfg(), res, src.Addr().Unmap())
		return false
	}
	return true
}

// wellFormed reports whether m has every header the proxy builds from:
// Via, From, To, Call-ID (not empty) and CSeq (with the request's method
// for a request), and no empty tag on From or To. A Call-ID or tag with a
// control character (RFC 3261 allows none: word and token characters) is
// not well formed either: the dialog token's MAC takes them as separated
// strings, and a NUL inside one would let two dialogs share an input.
// Nor is a message with two of a header that may appear once (oneEach).
func wellFormed(m sipmsg.Message) bool {
	if m.Via() == nil || m.CSeq() == nil || !oneEach(m) {
		return false
	}
	from, to, id := m.From(), m.To(), m.CallID()
	if from == nil || to == nil || id == nil || id.Value() == "" || hasControl(id.Value()) {
		return false
	}
	if !goodTag(from.Params) || !goodTag(to.Params) {
		return false
	}
	if req, ok := m.(*sipmsg.Request); ok && m.CSeq().MethodName != req.Method {
		return false
	}
	return true
}

// oneEach reports whether m has at most one each of To, From, Call-ID,
// CSeq, Content-Length and Max-Forwards (RFC 3261 7.3.1: none is a list).
// sipgo reads the last of each and writes them all back when the message
// is relayed, where the next hop may read the first: another dialog than
// the one its token was checked for, or, over TCP, another framing (a
// carrier that takes the first Content-Length 0 reads the body as a
// message of its own: an INVITE no admission granted).
func oneEach(m sipmsg.Message) bool {
	hs, ok := m.(interface{ Headers() []sipmsg.Header })
	if !ok {
		return false
	}
	var to, from, id, cseq, length, mf int
	for _, h := range hs.Headers() {
		switch h.(type) {
		case *sipmsg.ToHeader:
			to++
		case *sipmsg.FromHeader:
			from++
		case *sipmsg.CallIDHeader:
			id++
		case *sipmsg.CSeqHeader:
			cseq++
		case *sipmsg.ContentLengthHeader:
			length++
		case *sipmsg.MaxForwardsHeader:
			mf++
		}
	}
	return max(to, from, id, cseq, length, mf) <= 1
}

// goodTag is false for a tag parameter without a value (";tag" or
// ";tag="), and for parameters sipgo may have read otherwise than the
// next hop will (plainParams): the tag it found may be none, or another.
func goodTag(ps sipmsg.HeaderParams) bool {
	if ps == nil {
		return true
	}
	if !plainParams(ps) {
		return false
	}
	v, ok := ps.Get("tag")
	return !ok || (v != "" && !hasControl(v))
}

// plainParams reports whether no parameter of a From or To holds what
// sipgo's parameter parser (v1.7.2) reads otherwise than the next hop: it
// knows no quoted strings, so from ;x="a;tag=b" it reads a tag, and the
// node writes the header back as it came, where the next hop reads none (a
// re-INVITE that is a new call to the carrier, or a BYE of another dialog
// whose 481 would end the node's call). RFC 3261 allows a quoted value
// there; no user agent needs one in From or To. So a name or value may not
// hold a quote, a backslash, '<', '>', ',', a blank inside it or a
// control character; other characters outside RFC 3261's token (an '@' in
// a tag, say) are read alike by every parser and pass, as they did.
// Blanks around a name or value (RFC 3261's SWS, which sipgo keeps) are
// allowed, as is the blank "parameter" sipgo makes of a blank before the
// first ';'.
func plainParams(ps sipmsg.HeaderParams) bool {
	for _, kv := range ps {
		k, v := strings.TrimSpace(kv.K), strings.TrimSpace(kv.V)
		if k == "" && v == "" {
			continue
		}
		if k == "" || !paramText(k) || !paramText(v) {
			return false
		}
	}
	return true
}

// paramText reports whether s holds none of the characters plainParams
// refuses.
func paramText(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c == 0x7f || strings.IndexByte("\"\\<>,", c) >= 0 {
			return false
		}
	}
	return true
}

// hasControl reports whether s holds an ASCII control character (NUL to
// US, or DEL).
func hasControl(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f {
			return true
		}
	}
	return false
}

// screenCancel handles a CANCEL of a call in progress (see the screen).
// A CANCEL that matches no INVITE this proxy is handling goes on to sipgo
// (which answers it 481 through onCancel, or matches an INVITE transaction
// that already ended, on which it has no effect).
func (p *Proxy) screenCancel(req *sipmsg.Request) bool {
	e := p.invites.lookup(inviteKeyOf(req))
	if e == nil {
		return true
	}
	if e.src != req.Source() || e.transport != req.Transport() {
		p.m.SIPErrors.WithLabelValues("cancel_source").Inc()
		return false // not from the INVITE's source: not a hop-by-hop CANCEL
	}
	p.stateless(req, sipmsg.StatusOK, "OK")
	e.cancel()
	return false
}

// answerOutOfDialog answers an out-of-dialog request other than INVITE,
// ACK and CANCEL from a known party, statelessly: OPTIONS (keepalives of
// upstream dispatchers) 200, or 503 while draining or while the store
// cannot decide calls, so the dispatcher routes around this node; any other
// method 405. A peer's answer (peer: its name, "" for a carrier) carries
// the overload-control values it asks for (oc.go).
func (p *Proxy) answerOutOfDialog(req *sipmsg.Request, peer string) {
	var res *sipmsg.Response
	switch {
	case req.Method == sipmsg.OPTIONS && (p.draining.Load() || !p.usable()):
		res = sipmsg.NewResponseFromRequest(req, sipmsg.StatusServiceUnavailable, "Service Unavailable", nil)
	case req.Method == sipmsg.OPTIONS:
		res = sipmsg.NewResponseFromRequest(req, sipmsg.StatusOK, "OK", nil)
		res.AppendHeader(sipmsg.NewHeader("Allow", allowed))
		res.AppendHeader(sipmsg.NewHeader("Accept", "application/sdp"))
	default:
		res = sipmsg.NewResponseFromRequest(req, sipmsg.StatusMethodNotAllowed, "Method Not Allowed", nil)
		res.AppendHeader(sipmsg.NewHeader("Allow", allowed))
	}
	p.ocMarkOwn(peer, res)
	p.writeStateless(res)
}

// stateless sends the proxy's own response to req without a transaction.
func (p *Proxy) stateless(req *sipmsg.Request, code int, reason string) {
	p.writeStateless(sipmsg.NewResponseFromRequest(req, code, reason, nil))
}

func (p *Proxy) writeStateless(res *sipmsg.Response) {
	var err error
	if res.Transport() == "UDP" {
		err = p.sendUDP(res)
	} else {
		err = p.tp.WriteMsg(res)
	}
	if err != nil {
		p.log.Debug("stateless answer failed", "status", res.StatusCode, "error", err)
	}
}

// usable reports whether the store can decide calls (Options.Usable).
func (p *Proxy) usable() bool { return p.storeUsable == nil || p.storeUsable() }

// knownSource reports whether addr is a configured party: in a peer's
// sources or one of the carriers' addresses (resolved host names included).
func (p *Proxy) knownSource(cfg *config.Config, addr netip.Addr) bool {
	if cfg == nil {
		return false
	}
	if cfg.PeerByAddr(addr) != nil {
		return true
	}
	return p.isCarrierAddr(cfg, addr)
}

// guarded wraps a request handler so that a panic in it is logged once with
// its stack, counted in cpsguard_panics_total{where}, answered 500 when the
// transaction can still answer, and the transaction ended: the node goes on.
func (p *Proxy) guarded(where string, h sipgo.RequestHandler) sipgo.RequestHandler {
	return func(req *sipmsg.Request, tx sipmsg.ServerTransaction) {
		defer p.panics.Recover(where, func(error) {
			defer func() { _ = recover() }() // the answer must not panic again
			if !req.IsAck() {
				_ = tx.Respond(sipmsg.NewResponseFromRequest(req, sipmsg.StatusInternalServerError, "Server Internal Error", nil))
			}
			tx.Terminate()
		})
		h(req, tx)
	}
}

// inviteKey identifies an INVITE server transaction as a CANCEL names it
// and as sipgo keys it (RFC 3261 9.2, 17.2.3): top Via branch and sent-by
// (the transport's default port when the Via names none). Two INVITEs that
// differ only in their Call-ID are one transaction to sipgo — the second
// is absorbed as a retransmission — so they must be one entry here too: a
// peer reusing a branch with new Call-IDs would otherwise take a unit of
// the inflight bound per INVITE that no handler ever gives back (review
// finding). A branch without RFC 3261's magic cookie (RFC 2543) keeps the
// Call-ID, as sipgo's key for it does.
type inviteKey string

func inviteKeyOf(req *sipmsg.Request) inviteKey {
	if req.Via() == nil {
		return ""
	}
	// Built in a stack buffer: one allocation, the key's.
	var buf [128]byte
	return inviteKey(appendInviteKey(buf[:0], req))
}

// appendInviteKey appends req's inviteKey to dst (nothing when req has no
// Via).
func appendInviteKey(dst []byte, req *sipmsg.Request) []byte {
	v := req.Via()
	if v == nil {
		return dst
	}
	branch, _ := v.Params.Get("branch")
	port := v.Port
	if port <= 0 {
		port = sipmsg.DefaultPort(v.Transport)
	}
	key := append(dst, branch...)
	key = append(key, 0)
	key = append(key, v.Host...)
	key = append(key, ':')
	key = strconv.AppendInt(key, int64(port), 10)
	if !strings.HasPrefix(branch, sipmsg.RFC3261BranchMagicCookie) || len(branch) == len(sipmsg.RFC3261BranchMagicCookie) {
		key = append(key, 0)
		key = append(key, callID(req)...)
	}
	return key
}

// inviteEntry is one INVITE the proxy is handling, as a CANCEL finds it.
type inviteEntry struct {
	src       string // packet source ip:port of the INVITE
	transport string
	created   time.Time
	claimed   bool // a handler owns the entry (and removes it when done)

	// finished is when the handler returned (zero while it runs): the
	// entry stays a while as a tombstone, so a retransmission of the
	// INVITE that arrives just after its answer is known as one (it passes
	// without a unit of the inflight bound, and sipgo absorbs it).
	finished time.Time
	// kept: the handler left sipgo's server transaction alive (the call
	// was forwarded, so its final answer is the carrier's): sipgo absorbs
	// copies of the INVITE until Timer L or H (RFC 6026, RFC 3261 17.2.1),
	// and the tombstone lets them reach it for as long (keptTTL) instead of
	// deciding or shedding them as new calls.
	kept bool
	// answered: the call was answered (a 2xx relayed); its copies are
	// absorbed by the tombstone itself (register: regAbsorbed), since
	// sipgo's transaction lasts answeredLinger only.
	answered bool
	// A new initial INVITE's unit of the inflight bound (overload.go).
	inflightUnit
	// trying: the screen answered this INVITE 100 Trying when it arrived
	// (set before the entry is published, read by its handler through
	// claim), so the handler sends none: one 100 per INVITE transaction.
	trying bool

	mu    sync.Mutex
	fired bool   // a CANCEL from src arrived
	fn    func() // the handler's reaction, called once
}

// cancel records a CANCEL and tells the handler, once.
func (e *inviteEntry) cancel() {
	e.mu.Lock()
	if e.fired {
		e.mu.Unlock()
		return
	}
	e.fired = true
	fn := e.fn
	e.mu.Unlock()
	if fn != nil {
		fn()
	}
}

// onCancel sets the handler's reaction to a CANCEL; it runs at once when
// the CANCEL came first. fn runs at most once.
func (e *inviteEntry) onCancel(fn func()) {
	e.mu.Lock()
	e.fn = fn
	fired := e.fired
	e.mu.Unlock()
	if fired {
		fn()
	}
}

// inviteTable holds the INVITEs in progress, registered by the screen as
// they arrive (so a CANCEL that follows at once finds them) and claimed by
// their handler. Entries no handler claims (an INVITE sipgo absorbed as a
// retransmission after its handler ended) are swept after unclaimedTTL.
// A finished INVITE leaves a tombstone (tombstoneTTL, keptTTL when its
// transaction lives on in sipgo). Tombstones are kept apart from the
// INVITEs in progress, in queues ordered by expiry, so the sweep pops the
// expired ones instead of walking tens of thousands of them under the lock
// the read loop takes for every INVITE. Safe for concurrent use.
type inviteTable struct {
	mu    sync.Mutex
	m     map[inviteKey]*inviteEntry // in progress (handler running, or not yet claimed)
	tombs map[inviteKey]*inviteEntry // finished
	short tombQueue                  // tombstones of tombstoneTTL, in the order they finished
	kept  tombQueue                  // tombstones of keptTTL, likewise
}

// tombQueue is a FIFO of tombstones (the time each finished is in the
// entry; entries are appended as they finish, so in expiry order).
type tombQueue struct {
	q    []tombRef
	head int
}

type tombRef struct {
	k inviteKey
	e *inviteEntry
}

func (q *tombQueue) push(k inviteKey, e *inviteEntry) { q.q = append(q.q, tombRef{k, e}) }

// popExpired removes from tombs the queued tombstones finished more than
// ttl before now (a key since reused by a newer entry is left alone).
func (q *tombQueue) popExpired(tombs map[inviteKey]*inviteEntry, now time.Time, ttl time.Duration) {
	for q.head < len(q.q) {
		r := q.q[q.head]
		if now.Sub(r.e.finished) <= ttl {
			break
		}
		if tombs[r.k] == r.e {
			delete(tombs, r.k)
		}
		q.q[q.head] = tombRef{}
		q.head++
	}
	if q.head > 1024 && q.head*2 > len(q.q) {
		q.q = append(q.q[:0], q.q[q.head:]...)
		q.head = 0
	}
}

func (q *tombQueue) len() int { return len(q.q) - q.head }

// unclaimedTTL is how long an entry no handler claimed is kept (RFC 3261
// Timer H, the longest an INVITE server transaction absorbs retransmissions).
const unclaimedTTL = 32 * time.Second

// tombstoneTTL is how long the entry of a finished INVITE is kept: the
// callers' retransmissions sent before they saw the 100 Trying (Timer A:
// 0.5, 1, 2 s) then pass as such.
const tombstoneTTL = 2 * time.Second

// keptTTL is how long the tombstone of a forwarded INVITE is kept: sipgo's
// server transaction absorbs its copies that long (Timer L = Timer H =
// 64·T1 = 32 s). Copies read late (a socket buffer seconds deep under
// overload, a caller's retransmissions crossing its 100 Trying) would
// otherwise be new calls: a 503 to a caller whose call is up, or a second
// decision. It costs one small entry per forwarded call for 32 s.
const keptTTL = 32 * time.Second

// inflightOrphan is how long an unclaimed entry keeps its unit of the
// inflight bound: a handler usually claims its entry within milliseconds,
// but under heavy overload sipgo's goroutines wait seconds to run (the
// overload run saw INVITEs unread for 5 s), and giving units back early
// would loosen the bound exactly then. An entry still unclaimed after
// that belongs to an INVITE sipgo absorbed, whose unit would be lost.
const inflightOrphan = 5 * time.Second

// sweepEvery is the sweep's period (sweepInvites).
const sweepEvery = time.Second

func newInviteTable() *inviteTable {
	return &inviteTable{m: map[inviteKey]*inviteEntry{}, tombs: map[inviteKey]*inviteEntry{}}
}

// Results of inviteTable.register.
const (
	regNew      = iota // a new entry (with its unit, when one was asked)
	regLive            // a retransmission of an INVITE being handled
	regAnswered        // an INVITE just answered (its tombstone), or one no handler took
	regShed            // new, and acquire failed: nothing recorded
	regAbsorbed        // a copy of an answered INVITE: dropped, no answer
)

// register records req unless an entry for its key exists (a
// retransmission, or an INVITE just answered). For a new entry it first
// calls acquire, when not nil (a unit of the inflight bound, released
// through ctr): when that fails nothing is recorded (regShed).
func (t *inviteTable) register(req *sipmsg.Request, acquire func() bool, ctr *inflightCount) int {
	k := inviteKeyOf(req)
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.m[k]; ok {
		if !e.claimed && time.Since(e.created) > inflightOrphan {
			// No handler took it in time: sipgo may never have made a
			// transaction of it (or absorbed it); let sipgo see this copy.
			return regAnswered
		}
		return regLive
	}
	if e, ok := t.tombs[k]; ok {
		if e.answered {
			// Answered: sipgo's transaction absorbs copies for
			// answeredLinger only; after it this copy would make a new
			// one, and a new call. Absorbed here, as RFC 6026's Accepted
			// state does: no answer.
			return regAbsorbed
		}
		if e.kept {
			// Forwarded: sipgo's transaction absorbs the copy.
			return regAnswered
		}
		// After its handler ended. The proxy ends the transactions of its
		// own refusals at once; a peer's copy of a refused attempt is
		// answered from the refused table before it gets here
		// (refused.go), so this is another attempt with the same key
		// (another Call-ID, CSeq or source) or one the table forgot:
		// sipgo makes a new transaction of it and a new decision follows.
		// It takes a unit like any new INVITE (replaying refused INVITEs
		// must not get past the bound). A copy sipgo absorbs gives its
		// unit back as an orphan does.
		delete(t.tombs, k)
	}
	e := &inviteEntry{src: req.Source(), transport: req.Transport(), created: time.Now()}
	if acquire != nil {
		if !acquire() {
			return regShed
		}
		e.ctr = ctr
		e.held.Store(true)
		e.trying = true // screenInvite answers 100 Trying to it now
	}
	t.m[k] = e
	return regNew
}

// claim returns req's entry for its handler (creating it when the screen
// did not register it) and the function the handler calls when it
// returns: the entry becomes a tombstone, kept keptTTL when kept (the
// handler left the server transaction alive), else tombstoneTTL.
func (t *inviteTable) claim(req *sipmsg.Request) (*inviteEntry, func(kept, answered bool)) {
	k := inviteKeyOf(req)
	t.mu.Lock()
	e, ok := t.m[k]
	if !ok || e.claimed {
		e = &inviteEntry{src: req.Source(), transport: req.Transport(), created: time.Now()}
		t.m[k] = e
	}
	e.claimed = true
	t.mu.Unlock()
	return e, func(kept, answered bool) {
		e.releaseInflight()
		// A tombstone lives up to keptTTL: it keeps none of the call's
		// state (the reaction closes over its context).
		e.mu.Lock()
		e.fn = nil
		e.mu.Unlock()
		t.mu.Lock()
		if t.m[k] == e {
			delete(t.m, k)
			e.finished = time.Now()
			e.kept = kept
			e.answered = answered
			t.tombs[k] = e
			if kept {
				t.kept.push(k, e)
			} else {
				t.short.push(k, e)
			}
		}
		t.mu.Unlock()
	}
}

// lookup returns the entry of an INVITE being handled (not a tombstone).
func (t *inviteTable) lookup(k inviteKey) *inviteEntry {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.m[k]; e != nil && e.finished.IsZero() {
		return e
	}
	return nil
}

// sweep removes unclaimed entries older than unclaimedTTL and tombstones
// older than tombstoneTTL (keptTTL when kept), and gives back the inflight
// units of unclaimed entries older than inflightOrphan. It walks only the
// INVITEs in progress; expired tombstones are popped from their queues.
func (t *inviteTable) sweep(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, e := range t.m {
		if e.claimed {
			continue
		}
		if age := now.Sub(e.created); age > unclaimedTTL {
			e.releaseInflight()
			delete(t.m, k)
		} else if age > inflightOrphan {
			e.releaseInflight()
		}
	}
	t.short.popExpired(t.tombs, now, tombstoneTTL)
	t.kept.popExpired(t.tombs, now, keptTTL)
}

// has reports whether k names an INVITE in progress or a tombstone.
func (t *inviteTable) has(k inviteKey) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.m[k]; ok {
		return true
	}
	_, ok := t.tombs[k]
	return ok
}

// size returns the number of entries, tombstones included (tests).
func (t *inviteTable) size() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m) + len(t.tombs)
}
