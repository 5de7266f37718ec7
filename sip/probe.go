package sip

import (
	"context"
	"net/netip"
	"strconv"
	"strings"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/carriers"
	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/sip/internal/opaque"
)

// prober sends the carriers' OPTIONS probes through the proxy's SIP
// stack (carriers.Prober): the probe loops are the carriers.Set's.
type prober struct{ p *Proxy }

// Behind implements carriers.Prober (p.behind, overload.go).
func (pr prober) Behind() bool { return pr.p.behind.Recent() }

// Probe implements carriers.Prober.
func (pr prober) Probe(ctx context.Context, car *config.Carrier, timeout time.Duration) carriers.ProbeResult {
	ok, reason, full := pr.p.probeOnce(ctx, car.URI, timeout)
	return carriers.ProbeResult{OK: ok, Unanswered: !ok && strings.HasPrefix(reason, noAnswer), Detail: reason, Raw: full}
}

// probeOnce sends one SIP OPTIONS to the carrier at uri and waits up to
// timeout for a final answer. Any answer other than a 5xx or a 408 means
// the carrier is alive (a 404 or 405 comes from a live SIP stack, as
// Kamailio's dispatcher counts it). reason says what happened in stable
// words ("answered 503", "connection refused", sendReason), for the
// carrier's health reason; a probe that got no final answer in time has
// one starting noAnswer. full is the answer or error as it came (the
// carrier's reason phrase, the SIP stack's error text), for the debug
// log.
func (p *Proxy) probeOnce(ctx context.Context, uri string, timeout time.Duration) (ok bool, reason, full string) {
	t, err := parseCarrierURI(uri)
	if err != nil {
		return false, "invalid URI", err.Error()
	}
	dest, err := p.carrierAddrPort(t)
	if err != nil {
		return false, addressReason(err), "address: " + err.Error()
	}
	var ruri sipmsg.Uri
	if err := sipmsg.ParseUri(uri, &ruri); err != nil {
		return false, "invalid URI", err.Error()
	}
	req := p.optionsRequest(ruri, t.transport, dest.Addr())
	lo := addVia(p, req, t.transport, dest.Addr())
	req.SetTransport(t.transport)
	req.SetDestination(dest.String())
	req.Laddr = lo.laddr

	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := p.tls.CheckHop(ctx, req, []string{strings.Trim(t.host, "[]")}); err != nil {
		return false, sendReason(err), "send: " + err.Error()
	}
	tx, err := p.tl.Request(ctx, req)
	if err != nil {
		return false, sendReason(err), "send: " + err.Error()
	}
	defer tx.Terminate()
	for {
		select {
		case r := <-tx.Responses():
			if r.IsProvisional() {
				continue
			}
			code := r.StatusCode
			return !(code == sipmsg.StatusRequestTimeout || (code >= 500 && code < 600)), answered(code), strconv.Itoa(code) + " " + phrase(r.Reason)
		case <-tx.Done():
			if err := tx.Err(); err != nil {
				return false, sendReason(err), err.Error()
			}
			return false, noAnswer, noAnswer
		case <-ctx.Done():
			return false, noAnswer + " in " + timeout.String(), noAnswer + " in " + timeout.String()
		}
	}
}

// optionsRequest builds an out-of-dialog OPTIONS to ruri (its headers and
// maddr removed) from the proxy's own address; the caller adds the Via and
// the addressing.
func (p *Proxy) optionsRequest(ruri sipmsg.Uri, transport string, dest netip.Addr) *sipmsg.Request {
	ruri.Headers = nil
	if ruri.UriParams != nil {
		ruri.UriParams = ruri.UriParams.Clone()
		ruri.UriParams.Remove("maddr")
	}
	req := sipmsg.NewRequest(sipmsg.OPTIONS, ruri)
	lo := p.localFor(transport, dest)
	from := &sipmsg.FromHeader{
		Address: sipmsg.Uri{Scheme: "sip", User: "cpsguard", Host: lo.host, Port: lo.port},
		Params:  sipmsg.NewParams(),
	}
	from.Params.Add("tag", opaque.Text(16)) // not sipgo's GenerateTagN: see opaque
	to := &sipmsg.ToHeader{Address: sipmsg.Uri{Scheme: "sip", User: ruri.User, Host: ruri.Host, Port: ruri.Port}, Params: sipmsg.NewParams()}
	callID := sipmsg.CallIDHeader("probe-" + opaque.Text(24))
	mf := sipmsg.MaxForwardsHeader(70)
	req.AppendHeader(&mf)
	req.AppendHeader(from)
	req.AppendHeader(to)
	req.AppendHeader(&callID)
	req.AppendHeader(&sipmsg.CSeqHeader{SeqNo: 1, MethodName: sipmsg.OPTIONS})
	req.AppendHeader(sipmsg.NewHeader("Accept", "application/sdp"))
	req.SetBody(nil)
	return req
}

// noAnswer starts the detail of a probe that got no final answer.
const noAnswer = "no answer"
