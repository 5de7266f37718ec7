package sip

import (
	"testing"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/internal/siptest"
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
