package refusals

import (
	"encoding/binary"
	"hash/maphash"
	"net/netip"
	"sync"
	"time"
)

// TTL is how long a refusal is remembered: Timer H (64·T1, T1
// 500 ms).
const TTL = 32 * time.Second

// Max bounds the refusals remembered (all stripes together).
const Max = 1 << 16

// refusedStripes is the number of independently locked parts of the
// table (a power of two).
const refusedStripes = 16

// Table remembers the proxy's refusals of INVITEs for a ttl (TTL).
// Safe for concurrent use.
type Table struct {
	seed    maphash.Seed
	epoch   time.Time // monotonic; times are kept as offsets from it
	ttl     time.Duration
	max     int // per stripe
	stripes [refusedStripes]refusedStripe
}

type refusedStripe struct {
	mu sync.Mutex
	m  map[uint64]Refusal // by transaction hash
	// q holds the stripe's refusals in the order they were remembered (a
	// ring once it holds max): the oldest are expired or evicted first.
	q       []refusedRef
	head, n int
}

type refusedRef struct {
	tx uint64
	at int64
}

// Refusal is one remembered final answer.
type Refusal struct {
	Attempt    uint64 // hash of Call-ID, From tag, CSeq, source and transport
	at         int64  // when, since the table's epoch (ns)
	Code       int32  // the status code
	RetryAfter int32  // seconds; 0: none
	Reason     string // the reason phrase
	Tag        string // the To tag, unless Shed is set
	// ShedN: with Shed, the To tag is the sip package's shedTag and this
	// number in base 36 (the raw shed path's, kept as a number: no
	// string to allocate per shed).
	ShedN uint64
	Shed  bool
}

// New returns an empty table remembering up to size refusals
// (rounded up to a multiple of refusedStripes) for ttl each.
func New(size int, ttl time.Duration) *Table {
	t := &Table{seed: maphash.MakeSeed(), epoch: time.Now(), ttl: ttl, max: max(1, (size+refusedStripes-1)/refusedStripes)}
	for i := range t.stripes {
		t.stripes[i].m = map[uint64]Refusal{}
	}
	return t
}

// since is now as an offset from the table's epoch.
func (t *Table) since(now time.Time) int64 { return int64(now.Sub(t.epoch)) }

// TxHash is the hash of a transaction key (inviteKeyOf's bytes, or
// rawsip.Invite.TxKey's).
func (t *Table) TxHash(key []byte) uint64 { return maphash.Bytes(t.seed, key) }

// TxHashString is TxHash of a key held in a string (the same hash).
func (t *Table) TxHashString(key string) uint64 { return maphash.String(t.seed, key) }

// AttemptHash hashes what makes two INVITEs of one transaction key two
// attempts: the Call-ID, the From tag, the CSeq number, the packet source
// and transport. The From tag is what a stranger who can send with a
// peer's source cannot guess (RFC 3261 19.3: cryptographically random),
// where a branch and Call-ID often can be (SIPp's count calls): without
// it, an INVITE forced to a refusal (Max-Forwards 0, a forbidden
// customer) under a peer's next branch and Call-ID would have that
// peer's INVITE refused as its copy for TTL.
func (t *Table) AttemptHash(callID, fromTag []byte, cseq uint32, src netip.AddrPort, transport string) uint64 {
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

func (t *Table) stripe(tx uint64) *refusedStripe {
	return &t.stripes[tx&(refusedStripes-1)]
}

// Remember records r as the answer to the attempt (tx, r.Attempt), made
// at now. When the stripe is full its oldest refusal goes.
func (t *Table) Remember(tx uint64, r Refusal, now time.Time) {
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

// Lookup returns the refusal of the attempt (tx, attempt) if it was made
// less than the table's ttl before now.
func (t *Table) Lookup(tx, attempt uint64, now time.Time) (Refusal, bool) {
	s := t.stripe(tx)
	s.mu.Lock()
	r, ok := s.m[tx]
	s.mu.Unlock()
	if !ok || r.Attempt != attempt || r.at < t.since(now)-int64(t.ttl) {
		return Refusal{}, false
	}
	return r, true
}

// HasTx reports whether a refusal of some attempt of transaction tx is
// remembered (the raw shed path leaves such INVITEs to the screen).
func (t *Table) HasTx(tx uint64, now time.Time) bool {
	s := t.stripe(tx)
	s.mu.Lock()
	r, ok := s.m[tx]
	s.mu.Unlock()
	return ok && r.at >= t.since(now)-int64(t.ttl)
}

// Sweep forgets the refusals older than the ttl.
func (t *Table) Sweep(now time.Time) {
	cutoff := t.since(now) - int64(t.ttl)
	for i := range t.stripes {
		s := &t.stripes[i]
		s.mu.Lock()
		s.expire(cutoff)
		if s.n == 0 && len(s.m) > 0 {
			s.m = map[uint64]Refusal{} // a map keeps its buckets: give them back
		}
		s.mu.Unlock()
	}
}

// len returns the number of refusals remembered (tests).
func (t *Table) len() int {
	n := 0
	for i := range t.stripes {
		s := &t.stripes[i]
		s.mu.Lock()
		n += len(s.m)
		s.mu.Unlock()
	}
	return n
}
