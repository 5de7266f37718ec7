package sip

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"
)

// SIP overload control toward peers that ask for it (RFC 7339, the
// mandatory loss-based algorithm).
//
// A client that supports it puts a valueless "oc" parameter in the top
// Via of its requests. The node then answers with its current reduction
// in that Via of every response it sends or relays back:
//
//	Via: SIP/2.0/UDP 192.0.2.7:5060;branch=z9hG4bK..;oc=40;oc-validity=1000;oc-seq=1764013000.123;oc-algo="loss"
//
// asking the client to drop 40 % of the new requests it would send here,
// for oc-validity ms; oc-seq orders the values (a client ignores one older
// than the last it saw, so a late relayed response cannot undo a newer
// value). oc=0 says there is nothing to drop. Clients that do not ask get
// no oc values: none is added to their responses, and any a party
// downstream wrote into their Via is removed (ocRelay).
//
// The reduction follows the node's own shedding (sip.max_inflight), one
// value per peer (RFC 7339 5.3 lets a server ask each client for its own):
// every ocPeriod, with A of the peer's initial INVITEs let in and S of them
// shed for overload in that period, the peer's reduction v becomes
// 100 - (100-v)·A/(A+S): the share of its offered calls the node could
// take, applied on top of the reduction it already makes. A period without
// a shed halves it. So one party's flood asks that party to back off, not
// every compliant peer (a single node-wide value went 0 → 90 → 100 in 1.3 s
// under one non-compliant peer's flood: issue 22, C9). Shedding for a peer's or a customer's CPS limit is not
// overload and does not count: it is the admission decision, and a
// loss-based reduction of a peer's offer would also cut the calls within
// its limit.
//
// Limits: sipgo's Via parser (v1.7.2) splits a header at the comma inside
// a quoted oc-algo list, so a request whose top Via lists several
// algorithms (oc-algo="loss,rate") fails to parse and is dropped as
// malformed before this code sees it; a single algorithm (oc-algo="loss")
// parses into mangled parameters, which ocMark repairs (and a quoted
// parameter placed before the branch loses the branch: sipgo then treats
// the request as one without). Only responses to a peer's INVITEs, to
// the requests the node answers itself for a peer and to a peer's
// in-dialog requests relayed through a transaction carry the values; a
// carrier asking learns nothing. The stateless relay of in-dialog
// requests' responses (stateless.go) carries none, and removes any a
// party downstream wrote (ocStrip).

const (
	// ocPeriod is how often the reduction follows the node's shedding.
	ocPeriod = 500 * time.Millisecond
	// ocValidity is the oc-validity of every value, in ms: two periods,
	// so a value is refreshed before it lapses while responses flow.
	ocValidity = 1000
	// ocAlgo is the oc-algo the node selects: loss, which RFC 7339
	// makes mandatory for every client that asks.
	ocAlgo = `"loss"`
)

// ocMeters are the peers' meters, by peer name (bounded by the
// configuration: only peers take units or are shed). Safe for concurrent
// use.
type ocMeters struct{ m sync.Map }

// of returns peer's meter, created on first use.
func (ms *ocMeters) of(peer string) *ocMeter {
	if m, ok := ms.m.Load(peer); ok {
		return m.(*ocMeter)
	}
	m, _ := ms.m.LoadOrStore(peer, new(ocMeter))
	return m.(*ocMeter)
}

// shed returns the overload sheds counted for every peer (tests).
func (ms *ocMeters) shed() uint64 {
	var n uint64
	ms.m.Range(func(_, m any) bool { n += m.(*ocMeter).shed.Load(); return true })
	return n
}

// ocMeter computes the reduction asked of one overload-control client. The
// counts are plain atomics (the paths that bump them are the hot ones);
// the value is recomputed at most once per ocPeriod, by whichever caller
// finds the period over, and published for lock-free reads.
type ocMeter struct {
	taken atomic.Uint64 // initial INVITEs given a unit of the inflight bound
	shed  atomic.Uint64 // initial INVITEs shed for overload (503 Overloaded)

	due atomic.Int64 // ocClock ns at which the value is next recomputed
	cur atomic.Pointer[ocValue]

	mu        sync.Mutex
	at        time.Time // when the value was last computed
	prevTaken uint64
	prevShed  uint64
	seqMS     int64 // the last oc-seq, in Unix ms
}

// ocEpoch anchors ocClock.
var ocEpoch = time.Now()

// ocClock is t on the monotonic clock (ns since ocEpoch), so that a wall
// clock stepped back cannot keep a stale value in force.
func ocClock(t time.Time) int64 { return int64(t.Sub(ocEpoch)) }

// ocValue is one published reduction with its oc-seq.
type ocValue struct {
	percent int
	oc      string // strconv.Itoa(percent)
	seq     string // "<Unix s>.<ms>"
}

// current returns the reduction in force at now, recomputing it first
// when a period has passed.
func (m *ocMeter) current(now time.Time) *ocValue {
	if v := m.cur.Load(); v != nil && ocClock(now) < m.due.Load() {
		return v
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if v := m.cur.Load(); v != nil && ocClock(now) < m.due.Load() {
		return v // another caller recomputed it meanwhile
	}
	m.update(now)
	return m.cur.Load()
}

// update recomputes the value (m.mu held). The first call starts the
// history at now with no reduction.
func (m *ocMeter) update(now time.Time) {
	taken, shed := m.taken.Load(), m.shed.Load()
	value := 0
	if cur := m.cur.Load(); cur != nil && !m.at.IsZero() {
		value = cur.percent
		a, s := taken-m.prevTaken, shed-m.prevShed
		if s > 0 {
			// 1-v' = (1-v)·A/(A+S), rounded toward more reduction.
			keep := (uint64(100-value) * a) / (a + s)
			value = 100 - int(keep)
		} else {
			value /= 2
		}
		// A gap of several periods since the last update: the sheds
		// above are its first period's (a shed recomputes before it is
		// counted once a period is over: noteShed; admissions do not,
		// which only lowers the value), and each period after that had
		// no shed and halves the value.
		if gaps := now.Sub(m.at)/ocPeriod - 1; gaps > 0 {
			value >>= min(int(gaps), 7)
		}
	}
	m.at, m.prevTaken, m.prevShed = now, taken, shed
	ms := now.UnixMilli()
	if ms <= m.seqMS {
		ms = m.seqMS + 1 // strictly increasing even if the clock steps back
	}
	m.seqMS = ms
	m.cur.Store(&ocValue{
		percent: value,
		oc:      strconv.Itoa(value),
		seq:     fmt.Sprintf("%d.%03d", ms/1000, ms%1000),
	})
	m.due.Store(ocClock(now.Add(ocPeriod)))
}

// ocAsked reports whether a request's top Via asks for overload control:
// it carries an "oc" parameter (parameter names are case-insensitive;
// the name is read as ocParamName reads it).
func ocAsked(via *sipmsg.ViaHeader) bool {
	if via == nil {
		return false
	}
	for _, kv := range via.Params {
		if name, _, _ := ocParamName(kv); strings.EqualFold(name, "oc") {
			return true
		}
	}
	return false
}

// ocParamName is a Via parameter's name and value as the sender wrote
// them, from what sipgo's parser (v1.7.2) left: it mangles a quoted value,
// giving `;x="a";oc=5;rport` the key `x="a";oc=5;rport` (the rest of the
// header; the value is a) and then the keys ";oc" (5) and "rport" again.
// So a key is trimmed of the ';' and blanks around it, and a key that
// still holds a ';', '=' or '"' is cut to its first parameter (at a ';'
// outside quotes), whose value keeps its quotes; repaired reports either.
func ocParamName(kv sipmsg.HeaderKV) (name, value string, repaired bool) {
	k := strings.Trim(kv.K, "; \t")
	if !strings.ContainsAny(k, ";=\"") {
		return k, strings.TrimSpace(kv.V), k != kv.K
	}
	quoted := false
	end := len(k)
	for i := 0; i < len(k); i++ {
		if k[i] == '"' {
			quoted = !quoted
		} else if k[i] == ';' && !quoted {
			end = i
			break
		}
	}
	name, value, _ = strings.Cut(k[:end], "=")
	return strings.TrimSpace(name), unquoteBlank(strings.TrimSpace(value)), true
}

// unquoteBlank drops the quotes around a value with a blank in it: sipgo's
// writer quotes such a value itself, and would quote it twice.
func unquoteBlank(v string) string {
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' && strings.ContainsAny(v, " \t") {
		return v[1 : len(v)-1]
	}
	return v
}

// isOCParam reports a parameter name of RFC 7339's: oc, or oc-...
func isOCParam(name string) bool {
	return strings.EqualFold(name, "oc") || (len(name) >= 3 && strings.EqualFold(name[:3], "oc-"))
}

// ocClean returns params without any RFC 7339 parameter and with the keys
// sipgo mangled repaired (ocParamName), and whether the client's own
// valueless "oc" was among them. The oc values a Via carries are only
// ever the node's to write: a client's is the valueless oc, and anything
// else there came from a party downstream.
//
// A parameter as sipgo parsed it (an exact key) always wins over a
// repaired one of the same name, which is dropped: the stateless relay's
// MAC (stateless.go) and sipgo's transactions read the exact branch,
// received and rport, and a repair must never put another value in front
// of them. With strict (a Via a party downstream may have written), a
// repaired branch, received, rport or maddr is dropped even where no exact
// one exists, so a repair never adds one the MAC saw absent. A repaired
// name is kept once.
func ocClean(params sipmsg.HeaderParams, strict bool) (out sipmsg.HeaderParams, asked bool) {
	exact := make(map[string]bool, len(params))
	for _, kv := range params {
		if _, _, repaired := ocParamName(kv); !repaired {
			exact[strings.ToLower(kv.K)] = true
		}
	}
	out = make(sipmsg.HeaderParams, 0, len(params)+4)
	seen := make(map[string]bool, len(params))
	for _, kv := range params {
		name, value, repaired := ocParamName(kv)
		low := strings.ToLower(name)
		switch {
		case name == "":
		case isOCParam(name):
			asked = asked || (low == "oc" && value == "")
		case !repaired:
			out = append(out, sipmsg.HeaderKV{K: kv.K, V: unquoteBlank(kv.V)})
		case strict && (low == "branch" || low == "received" || low == "rport" || low == "maddr"):
		case !exact[low] && !seen[low]:
			seen[low] = true
			out = append(out, sipmsg.HeaderKV{K: name, V: value})
		}
	}
	return out, asked
}

// hasOCParam reports whether via holds any RFC 7339 parameter.
func hasOCParam(via *sipmsg.ViaHeader) bool {
	for _, kv := range via.Params {
		if name, _, _ := ocParamName(kv); isOCParam(name) {
			return true
		}
	}
	return false
}

// ocMark writes peer's current reduction into via, the top Via of a
// response on its way to peer, when it asked (ocAsked of its request;
// peer "" when it did not ask, or is no peer):
// every oc parameter the Via holds is replaced by the node's four (a
// carrier cannot speak for the node), and keys sipgo mangled are
// repaired (ocClean). via must be the response's own header (the
// responses the node builds clone the request's; a relayed response's is
// its own). The quoted oc-algo goes last, so that a client on a parser
// like sipgo's mangles nothing after it.
func (p *Proxy) ocMark(peer string, via *sipmsg.ViaHeader) {
	if peer == "" || via == nil {
		return
	}
	v := p.oc.of(peer).current(time.Now())
	params, _ := ocClean(via.Params, false)
	via.Params = append(params,
		sipmsg.HeaderKV{K: "oc", V: v.oc},
		sipmsg.HeaderKV{K: "oc-validity", V: strconv.Itoa(ocValidity)},
		sipmsg.HeaderKV{K: "oc-seq", V: v.seq},
		sipmsg.HeaderKV{K: "oc-algo", V: ocAlgo},
	)
}

// ocStrip removes the oc values from via, the top Via of a response the
// node relays without knowing its request (the stateless relay of
// in-dialog requests' responses): only the node may speak for itself to
// the party above, so whatever values the party below wrote go, and the
// client's own valueless oc stays as it was sent (none is added where
// there was none). A Via without any oc parameter is left untouched.
func ocStrip(via *sipmsg.ViaHeader) {
	if via == nil || !hasOCParam(via) {
		return
	}
	params, asked := ocClean(via.Params, true)
	if asked {
		params = append(params, sipmsg.HeaderKV{K: "oc"})
	}
	via.Params = params
}

// ocRelay readies via, the top Via of a relayed response on its way up,
// for the party that sent the request: peer's values when that peer asked
// (ocMark; peer "" otherwise), else no oc values at all (ocStrip),
// whatever the party below wrote there.
func (p *Proxy) ocRelay(peer string, via *sipmsg.ViaHeader) {
	if peer != "" {
		p.ocMark(peer, via)
		return
	}
	ocStrip(via)
}

// ocMarkOwn marks a response the node built for peer's request with
// NewResponseFromRequest: its top Via is a copy of the request's, so it
// says itself whether the client asked. peer "" (a stranger, a carrier)
// gets nothing.
func (p *Proxy) ocMarkOwn(peer string, res *sipmsg.Response) {
	if via := res.Via(); peer != "" && ocAsked(via) {
		p.ocMark(peer, via)
	}
}

// ocPeer is peer when asked, else "" (what ocMark and ocRelay take).
func ocPeer(peer string, asked bool) string {
	if asked {
		return peer
	}
	return ""
}
