package sip

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	callplaces "github.com/cpsguard/cpsguard/calls"
	"github.com/cpsguard/cpsguard/metrics"
	"github.com/cpsguard/cpsguard/records"
	"github.com/cpsguard/cpsguard/sip/internal/msgpart"
)

// Recorder takes the call records. *records.Writer satisfies it.
type Recorder interface {
	// Write offers a record to the sinks without waiting.
	Write(r *records.Record)
	// Enabled reports whether any sink is open (records are built only
	// then).
	Enabled() bool
}

// errOperatorEnd is the cause of a call context an operator ended
// (DELETE /api/v1/calls/{call_id}) before it was answered.
var errOperatorEnd = errors.New("sip: call ended by an operator")

// liveCall is what the proxy keeps of a forwarded call while it lives:
// what the Tracker hands back when the call ends (callEnded) or an
// operator ends it (EndCalls). It is shared by the call's goroutine, the
// BYE relays and the operations API.
type liveCall struct {
	// cancel ends the call's context (an operator's end before the
	// answer); nil once the call's handler has returned (mu).
	cancel context.CancelCauseFunc

	mu sync.Mutex
	// key is the call's key (its dialog tokens'), set when it is bound.
	key callKey
	// token is the ID of the dialog token of the call's current attempt
	// (the carrier it was last forwarded to, the one that answered once
	// answered): zero while none was minted. A token of an earlier attempt
	// (a carrier the call moved on from) is refused (ownTokenGone).
	token tokenID
	// answered: the 2xx was relayed; rec is the call's record as it stood
	// then, dlg what a BYE of the node's own needs.
	answered bool
	rec      records.Record
	dlg      *dialogState
	// txs are the answered call's INVITE transactions while the node waits
	// for its caller's ACK to end them (acked.go); ackFirst is that ACK
	// when it came before the call's handler returned; ackDone: none is
	// waited for any more.
	txs      *answeredTxs
	ackFirst *sipmsg.Request
	ackDone  bool
}

// dialogState is an answered call's dialog as the proxy sends requests in
// it (the node's own BYEs: an operator's end, a call ended before its
// answer): both legs, the caller's and the callee's
// identities, and the highest CSeq each side has used. A node holds one
// per answered call for the call's whole life, so the identities are kept
// as the text of their headers and URIs (at most maxIdentityText each):
// the node's own BYE sends the From and To as kept and parses the URIs
// again. Parsed clones cost an answered call ~0.6 KB more, and the
// collector's work with it (BENCHMARKS.md, session 13).
type dialogState struct {
	peer, carrier leg
	callID        string
	// callerFrom is the value of the caller's From (with its tag);
	// calleeTo that of the 2xx's To (the callee's tag), which is
	// calleeTag.
	callerFrom, calleeTo, calleeTag string
	// callerURI is the caller's Contact (else its From URI), calleeURI the
	// 2xx's Contact (else the forwarded Request-URI): each BYE's
	// Request-URI.
	callerURI, calleeURI string
	// toCaller and toCallee are the Route sets of a request to each side:
	// the Record-Route entries of the proxies between the node and it.
	toCaller, toCallee []string
	// callerSeq and calleeSeq are the highest CSeq numbers each side sent
	// in the dialog (the callee's 0 until it sends a request).
	callerSeq, calleeSeq uint32
}

// liveID names a call attempt in the live calls' list: a hash of its
// member (two calls may share a Call-ID).
func liveID(member string) string {
	sum := sha256.Sum256([]byte(member))
	return hex.EncodeToString(sum[:8])
}

// track lists the call as live (in the Tracker, and through it in the
// pool's registry) on its way to carrier, and binds it to its dialog: a
// BYE that races the 2xx finds it. Called before each forward.
func (c *call) track(carrier string) {
	if c.lc == nil {
		c.lc = &liveCall{cancel: c.cancel}
	}
	info := callplaces.Live{
		ID: liveID(c.member), CallID: callplaces.ClipCallID(c.callID),
		Peer: c.peer, Customer: c.customer, Carrier: carrier,
		Node: c.cfg.NodeID, StartedAt: records.Stamp(c.started),
	}
	c.p.calls.Track(c.member, info, c.lc)
	if !c.bound {
		c.bound = true
		c.lc.mu.Lock()
		c.lc.key = c.key
		c.lc.mu.Unlock()
		c.p.calls.Bind(c.member, c.dialog)
	}
}

// record is the call's record as it stands: everything but its end. An
// answered call keeps it for its whole life (liveCall.rec): its strings
// are copies, not parts of the INVITE (wire.Parser puts all of a
// message's headers in one string): c.callID, the users cloned.
func (c *call) record() records.Record {
	r := records.Record{
		CallID: callplaces.ClipCallID(c.callID), Peer: c.peer, Customer: c.customer,
		Source: c.req.Source(), CarriersTried: slices.Clone(c.tried), Code: c.code, Outcome: c.outcome,
		Reason: c.reason, Detail: c.detail,
		AdmissionWaitMS: c.admissionWait.Milliseconds(), PacingWaitMS: c.pacingWait.Milliseconds(),
		StartedAt: records.Stamp(c.started), Priority: c.priority != "",
	}
	if c.cfg != nil {
		r.Node = c.cfg.NodeID
	}
	if r.CarriersTried == nil {
		r.CarriersTried = []string{}
	}
	if f := c.req.From(); f != nil {
		r.FromUser = strings.Clone(clip(f.Address.User))
	}
	if t := c.req.To(); t != nil {
		r.ToUser = strings.Clone(clip(t.Address.User))
	}
	if len(c.tried) > 0 {
		r.Carrier = c.tried[len(c.tried)-1]
	}
	if c.setupSeen {
		ms := c.setup.Milliseconds()
		r.SetupMS = &ms
	}
	if !c.answeredAt.IsZero() {
		at := records.Stamp(c.answeredAt)
		r.AnsweredAt = &at
	}
	return r
}

// writeRecord writes the record of a call that ended without an answer
// the caller kept: refused, cancelled, failed at every carrier, or ended
// by the node. A call that reached no decision (a duplicate absorbed, a
// packet without a source) leaves none.
func (c *call) writeRecord() {
	if c.p.records == nil || (c.outcome == "" && c.code == 0) || !c.p.records.Enabled() {
		return
	}
	r := c.record()
	switch {
	case errors.Is(context.Cause(c.ctx), errOperatorEnd):
		r.EndedBy, r.EndReason = records.ByNode, records.EndOperator
	case c.canceled():
		r.EndedBy, r.EndReason = records.ByCaller, records.EndCancel
	case c.hungUp:
		r.EndedBy, r.EndReason = records.ByNode, records.EndAnswer
	case !c.answeredAt.IsZero():
		r.EndedBy, r.EndReason = records.ByNode, records.EndUnsupervised
		r.Finish(c.answeredAt)
		c.p.records.Write(&r)
		return
	case c.byCallee:
		r.EndedBy, r.EndReason = records.ByCallee, records.EndAnswer
	default:
		r.EndedBy, r.EndReason = records.ByNode, records.EndAnswer
	}
	r.Finish(time.Now())
	c.p.records.Write(&r)
}

// answered keeps what the call's end needs once its 2xx (ok) is relayed:
// its record so far and its dialog. It runs before the Tracker learns of
// the answer, so a BYE that ends the call at once finds both.
func (c *call) keepAnswered(ok *sipmsg.Response, dest leg) {
	rec := c.record()
	rec.Code = ok.StatusCode
	if rec.Outcome == "" {
		rec.Outcome = metrics.OutcomeForwarded
	}
	src, _ := netip.ParseAddrPort(c.req.Source())
	d := dialogState{
		peer:    leg{Addr: netip.AddrPortFrom(src.Addr().Unmap(), src.Port()), Proto: legTransportOf(c.req.Transport())},
		carrier: dest,
		callID:  c.callID,
	}
	d.keepIdentities(c.req, ok)
	// The received INVITE's Record-Routes are the proxies between the
	// caller and the node, nearest first: a request to the caller takes
	// them in that order. The 2xx's entries above the node's own are the
	// proxies towards the callee, farthest first.
	for _, h := range c.req.GetHeaders("Record-Route") {
		d.toCaller = append(d.toCaller, h.Value())
	}
	for _, h := range ok.GetHeaders("Record-Route") {
		if rr, isRR := h.(*sipmsg.RecordRouteHeader); isRR && c.p.isMe(&rr.Address) {
			break
		}
		d.toCallee = append([]string{h.Value()}, d.toCallee...)
	}
	if cs := c.req.CSeq(); cs != nil {
		d.callerSeq = cs.SeqNo
	}
	c.lc.mu.Lock()
	c.lc.answered, c.lc.rec, c.lc.dlg = true, rec, &d
	c.lc.mu.Unlock()
}

// cancelCall ends the call's context with cause, while its handler runs.
func (lc *liveCall) cancelCall(cause error) {
	lc.mu.Lock()
	cancel := lc.cancel
	lc.mu.Unlock()
	if cancel != nil {
		cancel(cause)
	}
}

// dropCancel forgets the call's cancel once its handler has returned (nil
// lc: the call was never listed).
func (lc *liveCall) dropCancel() {
	if lc == nil {
		return
	}
	lc.mu.Lock()
	lc.cancel = nil
	lc.mu.Unlock()
}

// dialog returns a copy of the call's dialog state (the zero state before
// the answer); lc.mu must be held.
func (lc *liveCall) dialog() dialogState {
	if lc.dlg == nil {
		return dialogState{}
	}
	return *lc.dlg
}

// unanswered undoes keepAnswered: the 2xx never reached the caller.
func (lc *liveCall) unanswered() {
	lc.mu.Lock()
	lc.answered = false
	lc.mu.Unlock()
}

// callEnded is told by the Tracker of every call it ended: an answered
// call's tokens die with it but at shutdown (callOver), and its record
// is written now (an unanswered one's by its own goroutine).
func (p *Proxy) callEnded(e callplaces.Ended) {
	lc, ok := e.Data.(*liveCall)
	if !ok || lc == nil {
		return
	}
	lc.mu.Lock()
	answered, rec, key := lc.answered, lc.rec, lc.key
	lc.mu.Unlock()
	if answered && e.Reason != callplaces.ReasonShutdown {
		// Over: no request of its tokens is relayed any more, whatever
		// callee tag it names (dialogs.go). At shutdown the call may go on
		// between its ends, no longer supervised.
		p.callOver(key)
	}
	if !answered || p.records == nil {
		return
	}
	switch e.Reason {
	case callplaces.ReasonBye:
		rec.EndedBy, rec.EndReason = e.By, records.EndBye
	case callplaces.ReasonMaxDuration:
		rec.EndedBy, rec.EndReason = records.ByNode, records.EndMaxDuration
	case callplaces.ReasonShutdown:
		rec.EndedBy, rec.EndReason = records.ByNode, records.EndShutdown
	default:
		rec.EndedBy, rec.EndReason = records.ByNode, e.Reason
	}
	rec.Finish(e.At)
	p.records.Write(&rec)
}

// sawInDialog notes the CSeq of a verified in-dialog request of an
// answered call this node holds, so that the node's own BYE in that
// direction follows it.
func (p *Proxy) sawInDialog(req *sipmsg.Request, hop inDialogHop) {
	cs := req.CSeq()
	from, to := req.From(), req.To()
	if cs == nil || from == nil || to == nil || req.IsAck() {
		return
	}
	for _, f := range p.calls.FindDialog(hop.key.String()) {
		lc, ok := f.Data.(*liveCall)
		if !ok {
			continue
		}
		lc.mu.Lock()
		if d := lc.dlg; lc.answered && d != nil {
			if hop.dir == fromCarrier {
				d.calleeSeq = max(d.calleeSeq, cs.SeqNo)
			} else {
				d.callerSeq = max(d.callerSeq, cs.SeqNo)
			}
		}
		lc.mu.Unlock()
	}
}

// EndCalls ends this node's live calls of callID and returns how many it
// ended: an answered call gets a BYE to each leg, sent by the node in the
// call's dialog, and its places are freed at once (record: ended_by node,
// end_reason operator); one not answered yet is stopped as at shutdown
// (503 to the caller, CANCEL to the carrier).
//
// callID may be given in full or clipped as the list shows it: the calls
// of the same clipped Call-ID are ended.
func (p *Proxy) EndCalls(ctx context.Context, callID string) int {
	n := 0
	for _, f := range p.calls.Find(callplaces.ClipCallID(callID)) {
		lc, ok := f.Data.(*liveCall)
		if !ok || lc == nil {
			continue
		}
		lc.mu.Lock()
		answered, d := lc.answered, lc.dialog()
		lc.mu.Unlock()
		if !answered {
			lc.cancelCall(errOperatorEnd)
			n++
			continue
		}
		if !p.calls.EndAs(ctx, f.Member, records.EndOperator, records.ByNode) {
			continue // ended meanwhile (a BYE crossed)
		}
		p.byeLeg(d, true, byeReasonOperator)
		p.byeLeg(d, false, byeReasonOperator)
		n++
	}
	return n
}

// The Reason headers of the node's own BYEs (byeLeg).
const (
	byeReasonOperator = `SIP;cause=200;text="Ended by the operator"`
	byeReasonEnded    = `SIP;cause=200;text="Call ended before its answer"`
)

// byeLeg sends the node's own BYE in dialog d to the caller (toCaller) or
// to the callee, to that leg's address, with a Reason header reason, and
// reads its answer in the background.
func (p *Proxy) byeLeg(d dialogState, toCaller bool, reason string) {
	callerURI, calleeURI, err := d.targets()
	if err != nil {
		if d.callerFrom != "" {
			p.log.Warn("the node's own BYE not sent: the dialog's URIs do not parse again", "call_id", clip(d.callID), "error", err)
		}
		return
	}
	var (
		ruri   sipmsg.Uri
		from   sipmsg.Header
		to     sipmsg.Header
		seq    uint32
		routes []string
		dest   leg
	)
	// From and To go out as kept, the text sipgo wrote of them: parsed
	// again, some come back otherwise (a display name ending in a
	// backslash does not parse; a quoted tag is quoted once more).
	if toCaller {
		// As the callee: From is the callee's (its tag), To the caller's.
		ruri, routes, dest = callerURI, d.toCaller, d.peer
		from, to = sipmsg.NewHeader("From", d.calleeTo), sipmsg.NewHeader("To", d.callerFrom)
		seq = d.calleeSeq + 1
	} else {
		ruri, routes, dest = calleeURI, d.toCallee, d.carrier
		from, to = sipmsg.NewHeader("From", d.callerFrom), sipmsg.NewHeader("To", d.calleeTo)
		seq = d.callerSeq + 1
	}
	bye := sipmsg.NewRequest(sipmsg.BYE, ruri)
	tp := dest.Name()
	addVia(p, bye, tp, dest.Addr.Addr())
	for _, r := range routes {
		bye.AppendHeader(sipmsg.NewHeader("Route", r))
	}
	mf := sipmsg.MaxForwardsHeader(70)
	bye.AppendHeader(&mf)
	bye.AppendHeader(from)
	bye.AppendHeader(to)
	cid := sipmsg.CallIDHeader(d.callID)
	bye.AppendHeader(&cid)
	bye.AppendHeader(&sipmsg.CSeqHeader{SeqNo: seq, MethodName: sipmsg.BYE})
	bye.AppendHeader(sipmsg.NewHeader("Reason", reason))
	bye.SetBody(nil)
	bye.SetTransport(tp)
	bye.SetDestination(dest.Addr.String())
	bye.Laddr = p.localFor(tp, dest.Addr.Addr()).laddr
	ctx, cancel := requestCtx(target{host: dest.Addr.Addr().String(), port: int(dest.Addr.Port()), transport: tp})
	defer cancel()
	tx, err := p.tl.Request(ctx, bye)
	if err != nil {
		p.log.Debug("the node's own BYE failed", "call_id", d.callID, "to_caller", toCaller, "reason", reason, "error", err)
		return
	}
	go drain(tx)
}

// maxIdentityText bounds each identity an answered call keeps as text
// (keepIdentities). Real From, To and Contact values are a few hundred
// bytes; sipgo writes some URI parameters (quoted values) out longer than
// it read them, a few hundred bytes of them into hundreds of KB.
const maxIdentityText = 1024

// keepIdentities keeps, as text, the identities of the dialog that inv's
// answer ok set up: the caller's From and URI (its Contact, else its
// From's), the callee's To, tag and URI (the 2xx's Contact, else inv's
// Request-URI). Each is kept as sipgo writes it, or, past
// maxIdentityText, without its URI's parameters (and a From or To with
// its tag alone, which the far end matches the dialog by): what a call up
// holds is bounded by what its messages carried. The four are written
// into one buffer and kept as parts of one string: sipgo's String and
// Value build each piece in a growing builder of its own (42 allocations
// for a plain call's values, 14 now).
func (d *dialogState) keepIdentities(inv *sipmsg.Request, ok *sipmsg.Response) {
	b := identityText{buf: make([]byte, 0, 512)}
	var from, to, callerURI, calleeURI textSpan
	f := inv.From()
	if f != nil {
		from = b.header(f, len("From: "), f.Address, f.Params)
	}
	if ct := inv.Contact(); ct != nil && ct.Address.Host != "" {
		callerURI = b.uri(&ct.Address)
	} else if f != nil {
		callerURI = b.uri(&f.Address)
	}
	if t := ok.To(); t != nil {
		to = b.header(t, len("To: "), t.Address, t.Params)
		d.calleeTag = strings.Clone(msgpart.Tag(t.Params))
	}
	if ct := ok.Contact(); ct != nil && ct.Address.Host != "" {
		calleeURI = b.uri(&ct.Address)
	} else {
		calleeURI = b.uri(&inv.Recipient)
	}
	s := string(b.buf)
	d.callerFrom, d.callerURI = from.of(s), callerURI.of(s)
	d.calleeTo, d.calleeURI = to.of(s), calleeURI.of(s)
}

// identityText is the buffer keepIdentities writes a dialog's identities
// into (an io.StringWriter for sipgo's StringWrite methods).
type identityText struct{ buf []byte }

// textSpan is a part of identityText's buffer: [start, end).
type textSpan struct{ start, end int }

// of is the span's text in s, the buffer as a string.
func (t textSpan) of(s string) string { return s[t.start:t.end] }

// WriteString appends s.
func (b *identityText) WriteString(s string) (int, error) {
	b.buf = append(b.buf, s...)
	return len(s), nil
}

// header writes h (a From or To) and spans its value (past the name and
// ": ", skip bytes): as sipgo writes it, or past maxIdentityText its URI
// without parameters and its tag alone.
func (b *identityText) header(h interface{ StringWrite(io.StringWriter) }, skip int, u sipmsg.Uri, params sipmsg.HeaderParams) textSpan {
	start := len(b.buf)
	h.StringWrite(b)
	if len(b.buf)-start-skip <= maxIdentityText {
		return textSpan{start + skip, len(b.buf)}
	}
	b.buf = b.buf[:start]
	bare := sipmsg.FromHeader{Address: bareURI(u), Params: sipmsg.NewParams()}
	if tag, ok := params.Get("tag"); ok {
		bare.Params.Add("tag", tag)
	}
	bare.StringWrite(b)
	return textSpan{start + len("From: "), len(b.buf)}
}

// uri writes u and spans it: as sipgo writes it, or past maxIdentityText
// without its parameters.
func (b *identityText) uri(u *sipmsg.Uri) textSpan {
	start := len(b.buf)
	u.StringWrite(b)
	if len(b.buf)-start <= maxIdentityText {
		return textSpan{start, len(b.buf)}
	}
	b.buf = b.buf[:start]
	bare := bareURI(*u)
	bare.StringWrite(b)
	return textSpan{start, len(b.buf)}
}

// bareURI is u without its parameters and headers.
func bareURI(u sipmsg.Uri) sipmsg.Uri {
	u.UriParams, u.Headers = nil, nil
	return u
}

// targets parses the dialog's URIs again (keepIdentities kept their
// text): each side's, a BYE's Request-URI. One that sipgo would not write
// out as kept (it writes some quoted parameters out longer each time it
// reads them) goes without its parameters.
func (d *dialogState) targets() (callerURI, calleeURI sipmsg.Uri, err error) {
	if d.callerFrom == "" || d.calleeTo == "" {
		return callerURI, calleeURI, errors.New("no From or To kept")
	}
	if callerURI, err = targetURI(d.callerURI); err != nil {
		return callerURI, calleeURI, fmt.Errorf("caller's URI: %w", err)
	}
	if calleeURI, err = targetURI(d.calleeURI); err != nil {
		return callerURI, calleeURI, fmt.Errorf("callee's URI: %w", err)
	}
	return callerURI, calleeURI, nil
}

// targetURI parses s, a kept URI (at most maxIdentityText).
func targetURI(s string) (sipmsg.Uri, error) {
	var u sipmsg.Uri
	if err := sipmsg.ParseUri(s, &u); err != nil {
		return u, err
	}
	if u.String() != s {
		u = bareURI(u)
	}
	return u, nil
}
