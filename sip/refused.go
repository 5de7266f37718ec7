package sip

import (
	"encoding/binary"
	"hash/maphash"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"
)

// Refused INVITEs: the Completed state of their transactions, kept cheap.
//
// The proxy's own final answer to a call it never forwarded (a limit's
// 503 or 486, 403, max_calls full, route down, a store failure, a shed at
// the inflight bound, 483, 487 to a call cancelled while queued) ends the
// call's transaction at once: sent once, no retransmissions towards a
// source that may be spoofed, no timers. RFC 3261 17.2.1 keeps an INVITE
// server transaction in Completed state for Timer H (64·T1 = 32 s), where
// a retransmitted INVITE gets the final answer again and never reaches
// the TU. Without it, a copy of a refused INVITE (one that crossed the
// refusal on the wire, or a UDP retransmission after the caller's Timer A)
// was a new transaction to sipgo and a new decision: counted and recorded
// a second time, and, once the rolling window had room again, admitted
// and forwarded to a carrier although its caller had the final refusal of
// that transaction (and ACKed it): a call nobody ACKs, on a carrier slot
// and window place the configuration never granted.
//
// So every such refusal is remembered for refusedTTL in refusedTable: the
// attempt (its transaction key as sipgo and the invite table form it: top
// Via branch and sent-by; and, as the admission member adds them, its
// Call-ID, CSeq number, packet source and transport; and its From tag,
// which a spoofer of the peer's source cannot guess: attemptHash) and the answer
// (code, reason, To tag, Retry-After). A copy that matches all of them
// gets the same final answer again from the screen, statelessly and built
// from the copy (one answer per datagram received: no amplification), and
// goes no further: no decision, no count in cpsguard_calls_total, no
// record, no forward; it is counted in
// cpsguard_sip_errors_total{reason="refused_copy"}. Its ACK ends as the
// first one's did. An INVITE that differs in any of them is another
// attempt, decided as any.
//
// A forwarded call's final refusal (the carrier's, relayed, or the
// node's own after the forward: all carriers failed) is remembered too:
// sipgo's server transaction absorbs the INVITE's copies only until the
// caller's ACK and Timer I (T4, 5 s) after it, and a copy after that was
// decided and forwarded again. An answered call's copies are the invite
// table's (its tombstone absorbs them, screen.go).
//
// The table is the bound on what this costs under a flood of refusals:
// at most refusedMax attempts (the oldest go first when it is full), two
// 64-bit hashes and the answer's few fields each (about 16 MB at the
// bound; the reason phrase and To tag are copies of refusedMaxText bytes
// at most, so a carrier's answers of kilobytes add no more than 16 MB),
// nothing per source, no timer; the table's part of remembering one is
// two hashes and a map write under one of refusedStripes locks, with no
// allocation (BenchmarkRefusedRemember). An attempt the table
// forgot (more than refusedMax refusals in refusedTTL) is decided again,
// as every copy was before. Hashes are keyed with a random seed per
// process, so a peer cannot make two of its attempts collide on purpose;
// a chance collision could only refuse an attempt, never admit one.
//
// Priority calls need nothing of their own: they are refused by no limit,
// but a refusal of one for another reason (its route down, the store
// failing, a forbidden customer) is its transaction's end like any other,
// and its caller's next attempt (a new branch) is decided afresh.

// refusedTTL is how long a refusal is remembered: Timer H (64·T1, T1
// 500 ms).
const refusedTTL = 32 * time.Second

// refusedMax bounds the refusals remembered (all stripes together).
const refusedMax = 1 << 16

// refusedMaxText bounds the reason phrase and the To tag a refusal keeps
// (bytes): a forwarded call's are the carrier's, up to MaxMessageSize.
// A longer reason is kept clipped (it is for people); a refusal with a
// longer To tag is not remembered (its copies are left to sipgo's
// transaction while it lasts, then decided again).
const refusedMaxText = 128

// refusedStripes is the number of independently locked parts of the
// table (a power of two).
const refusedStripes = 16

// refusedTable remembers the proxy's refusals of INVITEs for refusedTTL.
// Safe for concurrent use.
type refusedTable struct {
	seed    maphash.Seed
	epoch   time.Time // monotonic; times are kept as offsets from it
	ttl     time.Duration
	max     int // per stripe
	stripes [refusedStripes]refusedStripe
}

type refusedStripe struct {
	mu sync.Mutex
	m  map[uint64]refusal // by transaction hash
	// q holds the stripe's refusals in the order they were remembered (a
	// ring once it holds max): the oldest are expired or evicted first.
	q       []refusedRef
	head, n int
}

type refusedRef struct {
	tx uint64
	at int64
}

// refusal is one remembered final answer.
type refusal struct {
	attempt    uint64 // hash of Call-ID, CSeq, source and transport
	at         int64  // when, since the table's epoch (ns)
	code       int32
	retryAfter int32  // seconds; 0: none
	reason     string // the reason phrase
	tag        string // the To tag, unless shedN is set
	// shedN: the To tag is shedTag and this number in base 36 (the raw
	// shed path's, kept as a number: no string to allocate per shed).
	shedN uint64
	shed  bool
}

// toTag is the To tag of the refusal.
func (r *refusal) toTag() string {
	if r.shed {
		return shedTag + strconv.FormatUint(r.shedN, 36)
	}
	return r.tag
}

// newRefusedTable returns an empty table remembering up to size refusals
// (rounded up to a multiple of refusedStripes) for ttl each.
func newRefusedTable(size int, ttl time.Duration) *refusedTable {
	t := &refusedTable{seed: maphash.MakeSeed(), epoch: time.Now(), ttl: ttl, max: max(1, (size+refusedStripes-1)/refusedStripes)}
	for i := range t.stripes {
		t.stripes[i].m = map[uint64]refusal{}
	}
	return t
}

// since is now as an offset from the table's epoch.
func (t *refusedTable) since(now time.Time) int64 { return int64(now.Sub(t.epoch)) }

// txHash is the hash of a transaction key (inviteKeyOf's bytes, or
// rawsip.Invite.TxKey's).
func (t *refusedTable) txHash(key []byte) uint64 { return maphash.Bytes(t.seed, key) }

// txHashString is txHash of a key held in a string (the same hash).
func (t *refusedTable) txHashString(key string) uint64 { return maphash.String(t.seed, key) }

// attemptHash hashes what makes two INVITEs of one transaction key two
// attempts: the Call-ID, the From tag, the CSeq number, the packet source
// and transport. The From tag is what a stranger who can send with a
// peer's source cannot guess (RFC 3261 19.3: cryptographically random),
// where a branch and Call-ID often can be (SIPp's count calls): without
// it, an INVITE forced to a refusal (Max-Forwards 0, a forbidden
// customer) under a peer's next branch and Call-ID would have that
// peer's INVITE refused as its copy for refusedTTL.
func (t *refusedTable) attemptHash(callID, fromTag []byte, cseq uint32, src netip.AddrPort, transport string) uint64 {
	var h maphash.Hash
	h.SetSeed(t.seed)
	var buf [32]byte
	b := binary.BigEndian.AppendUint32(buf[:0], uint32(len(callID)))
	h.Write(b)
	h.Write(callID)
	b = binary.BigEndian.AppendUint32(buf[:0], uint32(len(fromTag)))
	h.Write(b)
	h.Write(fromTag)
	a := src.Addr().Unmap().As16()
	b = binary.BigEndian.AppendUint32(buf[:0], cseq)
	b = append(b, a[:]...)
	b = binary.BigEndian.AppendUint16(b, src.Port())
	h.Write(b)
	h.WriteString(transport)
	return h.Sum64()
}

func (t *refusedTable) stripe(tx uint64) *refusedStripe {
	return &t.stripes[tx&(refusedStripes-1)]
}

// remember records r as the answer to the attempt (tx, r.attempt), made
// at now. When the stripe is full its oldest refusal goes.
func (t *refusedTable) remember(tx uint64, r refusal, now time.Time) {
	r.at = t.since(now)
	s := t.stripe(tx)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expire(r.at - int64(t.ttl))
	if s.n == t.max {
		s.pop()
	}
	s.m[tx] = r
	ref := refusedRef{tx: tx, at: r.at}
	if len(s.q) < t.max {
		// Never wrapped: the queue ends at the slice's end.
		s.q = append(s.q, ref)
	} else {
		s.q[(s.head+s.n)%t.max] = ref
	}
	s.n++
}

// pop removes the stripe's oldest refusal (its entry only when no later
// refusal of the same transaction replaced it). Called with s.mu held.
func (s *refusedStripe) pop() {
	ref := s.q[s.head]
	if e, ok := s.m[ref.tx]; ok && e.at == ref.at {
		delete(s.m, ref.tx)
	}
	s.q[s.head] = refusedRef{}
	s.head = (s.head + 1) % len(s.q)
	s.n--
}

// expire pops the refusals made before cutoff. Called with s.mu held.
func (s *refusedStripe) expire(cutoff int64) {
	for s.n > 0 && s.q[s.head].at < cutoff {
		s.pop()
	}
	if s.n == 0 {
		// Empty: start again at the front, so an idle table gives its
		// queue back (a ring that never filled ends at the slice's end).
		s.q, s.head = s.q[:0], 0
	}
}

// lookup returns the refusal of the attempt (tx, attempt) if it was made
// less than the table's ttl before now.
func (t *refusedTable) lookup(tx, attempt uint64, now time.Time) (refusal, bool) {
	s := t.stripe(tx)
	s.mu.Lock()
	r, ok := s.m[tx]
	s.mu.Unlock()
	if !ok || r.attempt != attempt || r.at < t.since(now)-int64(t.ttl) {
		return refusal{}, false
	}
	return r, true
}

// hasTx reports whether a refusal of some attempt of transaction tx is
// remembered (the raw shed path leaves such INVITEs to the screen).
func (t *refusedTable) hasTx(tx uint64, now time.Time) bool {
	s := t.stripe(tx)
	s.mu.Lock()
	r, ok := s.m[tx]
	s.mu.Unlock()
	return ok && r.at >= t.since(now)-int64(t.ttl)
}

// sweep forgets the refusals older than the ttl.
func (t *refusedTable) sweep(now time.Time) {
	cutoff := t.since(now) - int64(t.ttl)
	for i := range t.stripes {
		s := &t.stripes[i]
		s.mu.Lock()
		s.expire(cutoff)
		if s.n == 0 && len(s.m) > 0 {
			s.m = map[uint64]refusal{} // a map keeps its buckets: give them back
		}
		s.mu.Unlock()
	}
}

// len returns the number of refusals remembered (tests).
func (t *refusedTable) len() int {
	n := 0
	for i := range t.stripes {
		s := &t.stripes[i]
		s.mu.Lock()
		n += len(s.m)
		s.mu.Unlock()
	}
	return n
}

// refusedKeys returns the transaction and attempt hashes of an initial
// INVITE (false when its source cannot be read).
func (p *Proxy) refusedKeys(req *sipmsg.Request) (tx, attempt uint64, ok bool) {
	src, err := netip.ParseAddrPort(req.Source())
	cseq := req.CSeq()
	from := req.From()
	if err != nil || cseq == nil || from == nil || req.Via() == nil {
		return 0, 0, false
	}
	var buf [128]byte
	tx = p.refused.txHash(appendInviteKey(buf[:0], req))
	var idBuf [128]byte
	id := append(idBuf[:0], callID(req)...)
	var tagBuf [64]byte
	tag := append(tagBuf[:0], tagOf(from.Params)...)
	return tx, p.refused.attemptHash(id, tag, cseq.SeqNo, src, req.Transport()), true
}

// rememberRefusal records res, the proxy's own final answer to the
// initial INVITE req that it ends req's transaction with (refused.go).
func (p *Proxy) rememberRefusal(req *sipmsg.Request, res *sipmsg.Response) {
	tx, attempt, ok := p.refusedKeys(req)
	if !ok {
		return
	}
	// Copies, of refusedMaxText at most: not substrings of the response,
	// whose strings (a carrier's, relayed) would be held with them.
	r := refusal{attempt: attempt, code: int32(res.StatusCode), reason: strings.Clone(res.Reason)}
	if len(r.reason) > refusedMaxText {
		r.reason = strings.ToValidUTF8(r.reason[:refusedMaxText], "")
	}
	if to := res.To(); to != nil {
		tag := tagOf(to.Params)
		if len(tag) > refusedMaxText {
			return
		}
		r.tag = strings.Clone(tag)
	}
	for _, h := range res.Headers() {
		// Not GetHeader: it lowers the name into a new string each time.
		if strings.EqualFold(h.Name(), "Retry-After") {
			if n, err := strconv.Atoi(strings.TrimSpace(h.Value())); err == nil && n > 0 {
				r.retryAfter = int32(min(n, 1<<31-1))
			}
			break
		}
	}
	p.refused.remember(tx, r, time.Now())
}

// answerRefusedCopy answers req, from a peer (its name, for the
// overload-control values it may ask for), with the remembered refusal of
// its attempt, statelessly, and reports whether it did: req is then a
// copy of an INVITE the proxy refused and goes no further.
func (p *Proxy) answerRefusedCopy(req *sipmsg.Request, peer string) bool {
	tx, attempt, ok := p.refusedKeys(req)
	if !ok {
		return false
	}
	r, ok := p.refused.lookup(tx, attempt, time.Now())
	if !ok {
		return false
	}
	res := sipmsg.NewResponseFromRequest(req, int(r.code), r.reason, nil)
	if tag := r.toTag(); tag != "" {
		if to := res.To(); to != nil {
			to.Params.Add("tag", tag) // the first answer's, not a new one
		}
	}
	if r.retryAfter > 0 {
		res.AppendHeader(sipmsg.NewHeader("Retry-After", strconv.Itoa(int(r.retryAfter))))
	}
	p.ocMarkOwn(peer, res)
	p.m.SIPErrors.WithLabelValues("refused_copy").Inc()
	p.writeStateless(res)
	return true
}
