package sip

import (
	"strconv"
	"testing"
	"time"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/siptest"
	"github.com/cpsguard/cpsguard/metrics"
)

// A peer at cps 10, burst 30, offered 100 CPS by SIPp for 4 s, on real
// Redis: the carrier sees the burst of 30 at once, then 10 a second, and
// never more than burst + cps × T in any interval T.
func TestE2EBurstThenRate(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	const cps, burst, rate, seconds = 10, 30, 100, 4
	h := startE2E(t, e2eOpts{peerCPS: cps, acme: 1000, globex: 1000,
		carriers: []e2eCarrier{{"a", "sip:" + car.Addr, 1000, time.Second}},
		edit:     func(c *config.Config) { c.Peers[0].Burst = burst }})
	offered := rate * seconds
	code, out := sipp(t, 40*time.Second, "-sf", scenario(t, "uac.xml"), "-i", "127.0.0.2", "-s", "100",
		"-r", strconv.Itoa(rate), "-m", strconv.Itoa(offered), "-l", "500", h.udp)
	if code != 0 {
		t.Fatalf("sipp exit %d (every call must be answered with 200 or 503):\n%s", code, tail(out))
	}
	waitCalls(t, h, "dialer-1", offered)
	arr := car.Arrivals()
	if len(arr) < burst {
		t.Fatalf("carrier saw %d INVITEs, want at least the burst of %d", len(arr), burst)
	}
	// The burst arrives at once: the first 30 within the time SIPp takes to
	// send them at 100 CPS (0.3 s). Paced at cps they would take 2.9 s;
	// half of that tells the two apart on however busy a box.
	if d, paced := arr[burst-1].Sub(arr[0]), time.Duration(burst-1)*time.Second/cps; d > paced/2 {
		t.Errorf("the burst of %d took %v at the carrier, want about 0.3 s (SIPp's own pace; paced would be %v)", burst, d, paced)
	}
	// Never more than burst + cps × T in any interval T (one call of slack
	// for the jitter between admission on Redis and arrival here).
	for i := range arr {
		for j := i; j < len(arr); j++ {
			allowed := burst + int(float64(cps)*arr[j].Sub(arr[i]).Seconds()) + 1
			if n := j - i + 1; n > allowed {
				t.Fatalf("%d INVITEs in %v at the carrier, more than burst + cps × T = %d; gaps: %s", n, arr[j].Sub(arr[i]), allowed, gaps(arr))
			}
		}
	}
	// Then the rate: at least 90 % of cps over the rest of the offer.
	span := arr[len(arr)-1].Sub(arr[0]).Seconds()
	if min := burst + int(0.9*cps*span); len(arr) < min {
		t.Errorf("forwarded %d in %.1f s, want >= %d (burst + 90 %% of cps)", len(arr), span, min)
	}
	fwd, rej := calls(h, "dialer-1", metrics.OutcomeForwarded), calls(h, "dialer-1", metrics.OutcomeRejectedCPS)
	if fwd != len(arr) || fwd+rej != offered {
		t.Errorf("forwarded %d + rejected_cps %d, carrier saw %d; want forwarded = carrier and sum = %d", fwd, rej, len(arr), offered)
	}
	t.Logf("carrier saw %d of %d in %.2f s; the burst of %d in %v", len(arr), offered, span, burst, arr[burst-1].Sub(arr[0]))
}

// A peer at cps 20 with a 10 s window of 50, offered 20 CPS for 6 s: the
// 1 s window would let all 120 through, the 10 s window holds the carrier
// to exactly 50.
func TestE2ESustainedWindowHolds(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	const cps, calls10s, seconds = 20, 50, 6
	h := startE2E(t, e2eOpts{peerCPS: cps, acme: 1000, globex: 1000,
		carriers: []e2eCarrier{{"a", "sip:" + car.Addr, 1000, time.Second}},
		edit: func(c *config.Config) {
			c.Peers[0].Windows = []config.Window{{Calls: calls10s, Per: 10 * time.Second}}
		}})
	offered := cps * seconds
	code, out := sipp(t, 40*time.Second, "-sf", scenario(t, "uac.xml"), "-i", "127.0.0.2", "-s", "100",
		"-r", strconv.Itoa(cps), "-m", strconv.Itoa(offered), "-l", "500", h.udp)
	if code != 0 {
		t.Fatalf("sipp exit %d (every call must be answered with 200 or 503):\n%s", code, tail(out))
	}
	waitCalls(t, h, "dialer-1", offered)
	arr := car.Arrivals()
	if got := siptest.MaxInWindow(arr, 10*time.Second); got != calls10s || len(arr) != calls10s {
		t.Errorf("carrier saw %d, at most %d in a rolling 10 s; want exactly %d", len(arr), got, calls10s)
	}
	if got := siptest.MaxInWindow(arr, time.Second); got > cps {
		t.Errorf("max INVITEs in a rolling second = %d, want <= %d", got, cps)
	}
	if rej := calls(h, "dialer-1", metrics.OutcomeRejectedCPS); rej != offered-calls10s {
		t.Errorf("rejected_cps = %d, want %d", rej, offered-calls10s)
	}
}
