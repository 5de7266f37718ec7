package sip

import (
	"bytes"
	"context"
	"log/slog"
	"net/netip"
	"strings"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/metrics"
	"github.com/cpsguard/cpsguard/policy"
	"github.com/cpsguard/cpsguard/sip/internal/ingress"
	"github.com/cpsguard/cpsguard/sip/internal/msgpart"
	"github.com/cpsguard/cpsguard/sip/internal/rawsip"
)

// Calls that must never be refused (issue 24, item 1).
//
// A call to an emergency number (priority.numbers: a prefix of the called
// number, the Request-URI's user as config.NormalizeNumber reads it) is a
// priority call whoever sends it; so is a call whose Resource-Priority
// header (RFC 4412) names a namespace of priority.resource_priority, when
// its peer has allow_resource_priority. A peer that may not claim priority
// gets normal treatment, and its claim is counted (kind refused_claim).
//
// A priority call is refused by no limit and never shed: the screen lets
// it take a unit of the inflight bound beyond the bound (it is still
// counted in flight), the UDP workers never shed it from raw bytes nor
// hold it back (priorityRaw reads the Request-URI's user and the
// Resource-Priority headers from the datagram; one that finds its share of
// the new-call lane full is parsed and handled, not answered 503), its
// admission buckets and max_calls places count it past their limits
// (admission.OverCount, a place of limit priorityPlace), and pacing sends
// it ahead of the calls waiting for the carrier's slots
// (pacing.WithPriority). It is still counted everywhere it passes, so a
// flood of "emergency" calls shows in the windows and takes the room of
// other calls; it is counted in cpsguard_priority_calls_total{peer,kind},
// marked in its record, and logged at Info (at most priorityLogRate lines
// a second; the rest are counted and the count logged).
//
// What still stops a priority call: an unknown source, a malformed
// INVITE (or Max-Forwards 0), a customer the peer may not name, a
// node draining, every carrier of its route down, paused or out of
// service (by hand or by ASR), and a store failure under
// store.on_error: reject.

// priorityLogRate is how many priority call lines are logged a second at
// most.
const priorityLogRate = 20

// priorityPlace is the limit a priority call's max_calls places are taken
// with: never full, so the call takes its place whatever the configured
// limit, and the calls after it see it counted.
const priorityPlace = 1 << 30

// calledNumber is the called number of an initial INVITE: the user part of
// its Request-URI (a tel: URI's number), normalised (config.NormalizeNumber).
func calledNumber(req *sipmsg.Request) string {
	return uriNumber(&req.Recipient)
}

// uriNumber is the normalised number of a Request-URI.
func uriNumber(u *sipmsg.Uri) string {
	if u.Scheme != "sip" && u.Scheme != "sips" && u.Scheme != "" {
		if strings.EqualFold(u.Scheme, "tel") {
			return config.NormalizeNumber(u.Raw())
		}
		return ""
	}
	return config.NormalizeNumber(u.User)
}

// priorityOf says whether a peer's initial INVITE is a priority call, and
// of which kind (metrics.PriorityNumber, metrics.PriorityResource; "" for
// none), and whether it carries a claim its peer may not make (refused).
func priorityOf(pol *policy.Policy, peer *config.Peer, number string, req *sipmsg.Request) (kind string, refused bool) {
	if number != "" && pol.PriorityNumber(number) {
		return metrics.PriorityNumber, false
	}
	if !pol.HasResourcePriority() {
		return "", false
	}
	claimed := false
	for _, h := range req.GetHeaders("Resource-Priority") {
		if pol.ResourcePriority(h.Value()) {
			claimed = true
			break
		}
	}
	switch {
	case !claimed:
		return "", false
	case peer.AllowResourcePriority:
		return metrics.PriorityResource, false
	}
	return "", true
}

// isPriority reports whether a parsed INVITE of peer is a priority call.
func isPriority(cfg *config.Config, peer *config.Peer, req *sipmsg.Request) bool {
	kind, _ := priorityOf(policy.Of(cfg), peer, calledNumber(req), req)
	return kind != ""
}

// resourcePriorityName is the header's name as priorityRaw matches it.
const resourcePriorityName = "resource-priority"

// priorityRaw reports whether a datagram from peer is an INVITE that the
// parsed path would take for a priority call, read from its raw bytes: the
// Request-URI's user (parsed as sipgo parses it), and every
// Resource-Priority header line (folded continuation lines included) when
// the peer may claim priority. It errs towards priority: a datagram it
// reads as one goes on to sipgo and the screen, which decide again (and
// shed it, when it is not one). A Request-URI sipgo would not parse makes
// a message sipgo drops anyway.
func priorityRaw(cfg *config.Config, peer *config.Peer, data []byte) bool {
	if !bytes.HasPrefix(data, inviteStart) {
		return false
	}
	pol := policy.Of(cfg)
	line, rest, ok := rawsip.CutLine(data)
	if !ok {
		return false
	}
	if sp := bytes.LastIndexByte(line, ' '); sp > len(inviteStart) {
		uri := bytes.TrimSpace(line[len(inviteStart):sp])
		// A cheap look first (no allocation): only a user that may be an
		// emergency number is parsed as sipgo parses it, and only a URI
		// within the ingress's bounds: this look runs before the scan
		// (holdInvite, under the worker's lock), sipgo parses URI
		// parameters in quadratic time, and a datagram over the bounds is
		// dropped by the scan anyway.
		if n := config.NormalizeNumber(string(rawsip.URIUser(uri))); n != "" && pol.PriorityNumber(n) &&
			separators(uri) <= ingress.DefaultBounds.ElementParams {
			var u sipmsg.Uri
			if sipmsg.ParseUri(string(uri), &u) == nil {
				if n := uriNumber(&u); n != "" && pol.PriorityNumber(n) {
					return true
				}
			}
		}
	}
	if !peer.AllowResourcePriority || !pol.HasResourcePriority() {
		return false
	}
	inRP := false
	for {
		if line, rest, ok = rawsip.CutLine(rest); !ok || len(line) == 0 {
			return false
		}
		if line[0] == ' ' || line[0] == '\t' {
			// A folded line continues the header above.
			if inRP && pol.ResourcePriority(string(line)) {
				return true
			}
			continue
		}
		colon := bytes.IndexByte(line, ':')
		if colon < 0 {
			inRP = false
			continue
		}
		inRP = rawsip.EqualFold(bytes.TrimSpace(line[:colon]), resourcePriorityName)
		if inRP && pol.ResourcePriority(string(line[colon+1:])) {
			return true
		}
	}
}

// separators counts the parameter separators of b, as ingress.Scan does.
func separators(b []byte) int {
	return bytes.Count(b, []byte{';'}) + bytes.Count(b, []byte{'&'})
}

// priorityRawFrom is priorityRaw for a datagram from an address: false
// for a source no peer owns.
func (p *Proxy) priorityRawFrom(cfg *config.Config, from netip.AddrPort, data []byte) bool {
	if cfg == nil || !bytes.HasPrefix(data, inviteStart) {
		return false
	}
	peer := cfg.PeerByAddr(from.Addr().Unmap())
	return peer != nil && priorityRaw(cfg, peer, data)
}

// notePriority counts a call's priority (or its refused claim) and logs
// a priority call at Info, rate-limited.
func (c *call) notePriority(kind string, refused bool) {
	if refused {
		c.p.m.Priority.WithLabelValues(c.peer, metrics.PriorityRefusedClaim).Inc()
		c.log.Debug("Resource-Priority claim of a peer not allowed to make one: normal treatment")
		return
	}
	if kind == "" {
		return
	}
	c.p.m.Priority.WithLabelValues(c.peer, kind).Inc()
	l := c.p.prioLog
	if l == nil {
		return
	}
	ok, suppressed := l.allow(time.Now(), priorityLogRate)
	if !ok {
		return
	}
	if suppressed > 0 {
		l.log.Info("priority call lines suppressed", "count", suppressed)
	}
	l.log.LogAttrs(context.Background(), slog.LevelInfo, "priority call",
		slog.String("call_id", clip(msgpart.CallID(c.req))), slog.String("peer", c.peer),
		slog.String("kind", kind), slog.String("to_user", clip(c.req.Recipient.User)))
}
