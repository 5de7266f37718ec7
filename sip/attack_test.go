package sip

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/siptest"
	"github.com/cpsguard/cpsguard/sip/internal/invites"
	"github.com/cpsguard/cpsguard/sip/internal/msgpart"
	"github.com/cpsguard/cpsguard/sip/internal/refusals"
)

// TestE2ERefusedPoisonNeedsTheFromTag: the refused table must not let
// anyone who can put a datagram on the wire with a peer's source (UDP
// sources are spoofed by anyone on the path) refuse that peer's next call
// in advance. A peer's branch, Call-ID and CSeq are often guessable (SIPp:
// branch z9hG4bK-<pid>-<call>-<n>, Call-ID <call>-<pid>@<ip>, CSeq 1); its
// From tag is not (RFC 3261 19.3: cryptographically random). An INVITE
// that forces a refusal (Max-Forwards 0: 483) under the victim's branch,
// sent-by, Call-ID, CSeq and source but another From tag must not make
// the victim's INVITE, sent after it, get that 483 as a "copy": it is
// another attempt and is decided (here forwarded, the carrier's 486).
func TestE2ERefusedPoisonNeedsTheFromTag(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", func(*sipmsg.Request) siptest.Answer { return siptest.Answer{Code: 486} })
	adm, pacer := newFakes()
	h := startProxy(t, testConfig(carrierCfg("a", car)), adm, pacer)
	peer := startUDPEnd(t, "127.0.0.2", nil)

	poison := rawInviteFrom(peer, h.udp, "victim-1", "forged-tag")
	mf := sipmsg.MaxForwardsHeader(0)
	poison.ReplaceHeader(&mf)
	peer.send(h.udp, poison)
	if r := finalOfRaw(peer, "victim-1", sipmsg.INVITE, 0); r == nil || r.StatusCode != sipmsg.StatusTooManyHops {
		t.Fatalf("forged INVITE: final %v, want 483", r)
	}

	peer.send(h.udp, rawInviteFrom(peer, h.udp, "victim-1", "victims-own-tag"))
	r := finalOfRaw(peer, "victim-1", sipmsg.INVITE, 1)
	if r == nil || r.StatusCode != 486 {
		t.Fatalf("the victim's INVITE: final %v, want it decided and forwarded (the carrier's 486), not the forged one's 483", r)
	}
	if n := car.Count("INVITE"); n != 1 {
		t.Errorf("INVITEs at the carrier = %d, want 1", n)
	}
	if got := sipErrors(h, "refused_copy"); got != 0 {
		t.Errorf("sip_errors_total{refused_copy} = %v, want 0", got)
	}
}

// FuzzRefusedKeys: whenever the raw shed path reads an INVITE (and the
// screen would take sipgo's reading of it), both key it alike: a refusal
// one remembers is found by the other (refused.go).
func FuzzRefusedKeys(f *testing.F) {
	base := strangerRequest("INVITE", "127.0.0.1:5060", "", "")("127.0.0.2:5062")
	f.Add(base)
	for _, r := range [][2]string{
		{"Via: ", "v: "},
		{"Via: ", "VIA:  "},
		{"From: ", "f:"},
		{"Call-ID: ", "i:\t"},
		{"CSeq: 1 ", "CSeq:  0001 "},
		{";branch=", ";Branch="},
		{"127.0.0.2:5062;branch", "127.0.0.2:05062;branch"},
		{"127.0.0.2:5062;branch", "Host.Example:5062;branch"},
		{"127.0.0.2:5062;branch", "[::1]:5062;branch"},
		{";rport\r\n", ";rport,SIP/2.0/UDP 127.0.0.3:5060;branch=z9hG4bK-2\r\n"},
		{";rport\r\n", ";rport\r\nVia: SIP/2.0/UDP 127.0.0.3;branch=z9hG4bK-2\r\n"},
		{";tag=f1", ";tag=F1;x=y"},
		{"SIP/2.0/UDP", "SIP/2.0/udp"},
		{"SIP/2.0/UDP", "SIP/2.0/TCP"},
		{"branch=z9hG4bK-INVITE", "branch=z9hG4bK"},
		{"branch=z9hG4bK-INVITE", "branch=Z9HG4BK-x"},
	} {
		f.Add(strings.Replace(base, r[0], r[1], 1))
	}
	from := netip.MustParseAddrPort("127.0.0.2:5062")
	f.Fuzz(func(t *testing.T, msg string) {
		tab := refusals.New(16, refusals.TTL)
		p := &Proxy{refused: tab}
		inv, ok := scanInvite([]byte(msg))
		if !ok {
			return
		}
		m, err := sipmsg.ParseMessage([]byte(msg))
		if err != nil {
			t.Fatalf("raw path reads %q, sipgo does not: %v", msg, err)
		}
		req, ok := m.(*sipmsg.Request)
		if !ok || !wellFormed(req) {
			return
		}
		req.SetSource(from.String())
		req.SetTransport("UDP")
		tx, attempt, ok := p.refusedKeys(req)
		if !ok {
			t.Fatalf("no keys for the parsed INVITE %q", msg)
		}
		if raw := tab.TxHashString(inv.TxKey()); raw != tx {
			t.Errorf("%q: transaction key raw %q, parsed %q", msg, inv.TxKey(), invites.KeyOf(req))
		}
		if raw := tab.AttemptHash(inv.CallID(), inv.FromTag(), inv.CSeqNo(), from, "UDP"); raw != attempt {
			t.Errorf("%q: attempt raw (%q %q %d), parsed (%q %q %d)", msg, inv.CallID(), inv.FromTag(), inv.CSeqNo(),
				msgpart.CallID(req), msgpart.Tag(req.From().Params), req.CSeq().SeqNo)
		}
	})
}

// TestForwardedRefusalKeepsLittleOfTheCarrier: a forwarded call's final
// refusal is remembered for 32 s (refused.go), and its reason phrase and
// To tag are the carrier's: a carrier (gone bad, or just verbose) that
// answers with a reason phrase or a To tag of kilobytes must not make
// each remembered refusal hold them (up to MaxMessageSize, 16 KB: a GB at
// the table's bound, where refused.go counts some 16 MB). A long reason
// is kept clipped; a refusal with a To tag too long to keep is not
// remembered (its copies are left to sipgo's transaction, as before).
func TestForwardedRefusalKeepsLittleOfTheCarrier(t *testing.T) {
	const maxKept = 128 // refusedMaxText
	for _, tc := range []struct {
		name, reason, tag string
		remembered        bool
	}{
		{"reason", strings.Repeat("Busy ", 2000), "busy-callee", true},
		{"tag", "Busy Here", strings.Repeat("t", 4000), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			car := startUDPEnd(t, "127.0.0.1", func(req *sipmsg.Request) *sipmsg.Response {
				if !req.IsInvite() {
					return nil
				}
				res := sipmsg.NewResponseFromRequest(req, 486, tc.reason, nil)
				res.To().Params.Add("tag", tc.tag)
				return res
			})
			adm, pacer := newFakes()
			h := startProxy(t, testConfig(config.Carrier{Name: "raw", URI: "sip:" + car.addr(), CPS: 100, MaxWait: time.Second}), adm, pacer)
			peer := startUDPEnd(t, "127.0.0.2", nil)
			id := "verbose-" + tc.name
			inv := rawInviteFrom(peer, h.udp, id, "ftag-"+id)
			peer.send(h.udp, inv)
			busy := finalOfRaw(peer, id, sipmsg.INVITE, 0)
			if busy == nil || busy.StatusCode != 486 {
				t.Fatalf("the call's final answer: %v, want the carrier's 486", busy)
			}
			req := inv.Clone()
			req.SetSource(peer.addr())
			req.SetTransport("UDP")
			tx, attempt, ok := h.p.refusedKeys(req)
			if !ok {
				t.Fatal("no keys for the INVITE")
			}
			r, ok := h.p.refused.Lookup(tx, attempt, time.Now())
			if ok != tc.remembered {
				t.Fatalf("remembered = %v, want %v", ok, tc.remembered)
			}
			if len(r.Reason) > maxKept || len(r.Tag) > maxKept {
				t.Errorf("the refusal keeps a reason of %d bytes and a To tag of %d, want at most %d each", len(r.Reason), len(r.Tag), maxKept)
			}
			if ok && r.Tag != tc.tag {
				t.Errorf("remembered To tag %q, want the carrier's %q", r.Tag, tc.tag)
			}
		})
	}
}
