package sip

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cpsguard/cpsguard/internal/siptest"
	"github.com/cpsguard/cpsguard/metrics"
)

// TestInviteFromCarrierAddressPerUnknownSource: an initial INVITE from a
// carrier's address (a known source, so the screen lets it through, but
// no peer's) is never forwarded, is counted as a forbidden call of the
// unknown peer, and is answered as sip.unknown_source says: reject, one
// 403; drop, nothing at all (not even a 100 Trying) and, retransmitted,
// still nothing.
func TestInviteFromCarrierAddressPerUnknownSource(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	for _, mode := range []string{"reject", "drop"} {
		t.Run(mode, func(t *testing.T) {
			cfg := testConfig(carrierCfg("a", car))
			cfg.SIP.UnknownSource = mode
			adm, pacer := newFakes()
			h := startProxy(t, cfg, adm, pacer)
			before := car.Count("INVITE")
			build := strangerRequest("INVITE", h.udp, car.Addr, "")
			var got []string
			if mode == "reject" {
				got = rawUDP(t, "127.0.0.1", h.udp, build, 1500*time.Millisecond, true)
				if len(got) != 1 || !strings.HasPrefix(got[0], "SIP/2.0 403 ") {
					t.Errorf("INVITE from the carrier's address, reject: got %q, want exactly one 403", got)
				}
			} else {
				// The INVITE and its retransmission 0.5 s later (RFC 3261
				// timer A), from one socket, then 1 s of listening.
				conn := rawSend(t, "127.0.0.1", h.udp, build)
				defer conn.Close()
				buf := make([]byte, 65535)
				resent := false
				deadline := time.Now().Add(1500 * time.Millisecond)
				for i := 0; i < 100; i++ {
					wait := time.Until(deadline)
					if !resent {
						wait = 500 * time.Millisecond
					}
					_ = conn.SetReadDeadline(time.Now().Add(wait))
					n, _, err := conn.ReadFromUDP(buf)
					if err != nil && !resent {
						resent = true
						ra, _ := net.ResolveUDPAddr("udp", h.udp)
						_, _ = conn.WriteToUDP([]byte(build(conn.LocalAddr().String())), ra)
						continue
					}
					if err != nil {
						break
					}
					line, _, _ := strings.Cut(string(buf[:n]), "\r\n")
					got = append(got, line)
				}
				if len(got) != 0 {
					t.Errorf("INVITE from the carrier's address, drop: got %q, want nothing", got)
				}
			}
			waitFor(t, func() bool {
				return testutil.ToFloat64(h.m.Calls.WithLabelValues(PeerUnknown, metrics.OutcomeRejectedForbidden)) >= 1
			}, "calls_total{unknown,rejected_forbidden} counted")
			if n := car.Count("INVITE") - before; n != 0 {
				t.Errorf("carrier INVITEs = %d, want 0", n)
			}
		})
	}
}
