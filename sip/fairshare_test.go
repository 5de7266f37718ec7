package sip

// End-to-end tests of issue 24, item 2: a saturated carrier shared fairly
// by customer. Real sockets on loopback, a private redis-server behind the
// real stores, sipgo callers numbering their calls per customer, and a
// measuring carrier that tells each customer's INVITEs apart by Call-ID.

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/siptest"
	"github.com/cpsguard/cpsguard/pacing"
)

// sendPaced sends n INVITEs naming customer from caller to proxy, one
// every 1/rate s, with Call-IDs "<customer>-<i>", and returns the final
// codes (0: none before ctx ended).
func sendPaced(ctx context.Context, caller *siptest.Caller, proxy, customer string, rate float64, n int) []int {
	codes := make([]int, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		if d := time.Until(start.Add(time.Duration(float64(i) / rate * float64(time.Second)))); d > 0 {
			select {
			case <-ctx.Done():
				return codes
			case <-time.After(d):
			}
		}
		req := caller.Invite(proxy, "X-Customer: "+customer)
		id := sipmsg.CallIDHeader(fmt.Sprintf("%s-%d", customer, i))
		req.AppendHeader(&id)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if res := caller.Final(ctx, req); res != nil {
				codes[i] = res.StatusCode
			}
		}()
	}
	wg.Wait()
	return codes
}

// fairHarness runs the proxy on Redis with one carrier (cps, max_wait)
// shared by customer, acme and globex weighted as given, both named by
// dialer-1 (127.0.0.2), every admission limit far away.
func fairHarness(t *testing.T, cps float64, maxWait time.Duration, acme, globex int) (*harness, *siptest.Carrier) {
	t.Helper()
	car := siptest.StartCarrier(t, "127.0.0.1", func(*sipmsg.Request) siptest.Answer { return siptest.Answer{Code: 486} })
	h := startE2E(t, e2eOpts{peerCPS: 10000, acme: 10000, globex: 10000,
		carriers: []e2eCarrier{{"a", "sip:" + car.Addr, cps, maxWait}},
		edit: func(c *config.Config) {
			c.Customer("acme").Weight = acme
			c.Customer("globex").Weight = globex
			c.Carriers[0].ShareBy = config.ShareByCustomer
		}})
	return h, car
}

func count(codes []int, code int) int {
	n := 0
	for _, c := range codes {
		if c == code {
			n++
		}
	}
	return n
}

// inWindow counts ts in [from, from+w).
func inWindow(ts []time.Time, from time.Time, w time.Duration) int {
	n := 0
	for _, t := range ts {
		if !t.Before(from) && t.Before(from.Add(w)) {
			n++
		}
	}
	return n
}

// shareOf: a call draws on its customer's share, its peer's (share_by
// peer, or no customer), or none, with the configured weight.
func TestShareOf(t *testing.T) {
	cfg, err := config.Parse([]byte(`
peers: [{name: d, sources: [127.0.0.1/32], cps: 5, weight: 2, customers: [acme]}]
customers: [{name: acme, cps: 5, weight: 3}]
carriers:
  - {name: c, uri: "sip:127.0.0.1:5070", cps: 20, max_wait: 1s, share_by: customer}
  - {name: p, uri: "sip:127.0.0.1:5071", cps: 20, max_wait: 1s, share_by: peer}
  - {name: n, uri: "sip:127.0.0.1:5072", cps: 20, max_wait: 1s}
routes: {default: [c, p, n]}
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		carrier, customer string
		want              pacing.Share
	}{
		{"c", "acme", pacing.Share{Name: "customer:acme", Weight: 3}},
		{"c", "", pacing.Share{Name: "peer:d", Weight: 2}},
		{"p", "acme", pacing.Share{Name: "peer:d", Weight: 2}},
		{"n", "acme", pacing.Share{}},
	} {
		if got := shareOf(cfg, cfg.Carrier(tc.carrier), "d", tc.customer); got != tc.want {
			t.Errorf("carrier %s, customer %q: got %+v, want %+v", tc.carrier, tc.customer, got, tc.want)
		}
	}
}

// Two customers, weights 1 and 3, each offering more than the whole
// carrier: in every rolling second while both wait, the carrier gets its
// cps at most, about a quarter of it from acme and three quarters from
// globex. First come, first served gives them what they offer, 1:1.
func TestE2EFairShareWeightedSplit(t *testing.T) {
	const cps, offered, seconds = 20, 30, 4
	h, car := fairHarness(t, cps, 2*time.Second, 1, 3)
	caller := siptest.StartCaller(t, "127.0.0.2")
	ctx := ctxT(t, 30*time.Second)
	var acmeCodes, globexCodes []int
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); acmeCodes = sendPaced(ctx, caller, h.udp, "acme", offered, offered*seconds) }()
	go func() {
		defer wg.Done()
		globexCodes = sendPaced(ctx, caller, h.udp, "globex", offered, offered*seconds)
	}()
	wg.Wait()
	waitCalls(t, h, "dialer-1", 2*offered*seconds)

	all, acme, globex := car.Arrivals(), car.ArrivalsOf("acme-"), car.ArrivalsOf("globex-")
	if got := siptest.MaxInWindow(all, time.Second); got > cps {
		t.Errorf("max INVITEs in a rolling second = %d, want <= %d; gaps: %s", got, cps, gaps(all))
	}
	if len(acme) != count(acmeCodes, 486) || len(globex) != count(globexCodes, 486) {
		t.Errorf("carrier saw acme %d, globex %d; callers got 486 for %d and %d", len(acme), len(globex), count(acmeCodes, 486), count(globexCodes, 486))
	}
	// Both wait while both are refused some calls: from the first second
	// until the last second of the sends (the bookings run on after).
	if count(acmeCodes, 503) == 0 || count(globexCodes, 503) == 0 {
		t.Fatalf("503s: acme %d, globex %d; want both over the carrier (30 CPS offered each, 20 CPS carrier)", count(acmeCodes, 503), count(globexCodes, 503))
	}
	// Over the span both are backlogged, acme gets a quarter of the
	// carrier (first come, first served would give it half: both offer
	// 30 CPS), and so in each second of it: the span's three seconds are
	// checked one by one (disjoint, so that one stall of a shared machine,
	// a caller or the node paused for a moment, spoils one or two of them
	// and not every rolling second that overlaps it); one may miss the
	// band. First come, first served misses it in all three.
	start, end := all[0].Add(time.Second), all[0].Add(seconds*time.Second)
	a, g := inWindow(acme, start, end.Sub(start)), inWindow(globex, start, end.Sub(start))
	if share := float64(a) / float64(max(1, a+g)); share < 0.18 || share > 0.32 {
		t.Errorf("acme's share while both were backlogged = %.2f (acme %d, globex %d), want about 0.25 (weights 1:3)", share, a, g)
	}
	windows, off := 0, 0
	for from := start; !from.Add(time.Second).After(end); from = from.Add(time.Second) {
		windows++
		a, g := inWindow(acme, from, time.Second), inWindow(globex, from, time.Second)
		// 19.8 slots a second (interval 1/cps + 1 %): about 5 and 15.
		if a < 3 || a > 7 || g < 11 || g > 17 {
			off++
			t.Logf("second from +%v: acme %d, globex %d; want about 5 and 15 (weights 1:3 of %d)",
				from.Sub(all[0]).Round(time.Millisecond), a, g, cps)
		}
	}
	if windows != seconds-1 {
		t.Errorf("%d seconds checked, want %d", windows, seconds-1)
	}
	if off > 1 {
		t.Errorf("%d of %d seconds off the 1:3 split (logged above), want at most one", off, windows)
	}
	t.Logf("carrier: acme %d, globex %d, max %d in a rolling second", len(acme), len(globex), siptest.MaxInWindow(all, time.Second))
}

// A customer within its share keeps getting through while another bursts
// at several times the carrier: every steady call is forwarded, none is
// refused. First come, first served queues it behind the burst's max_wait
// and refuses it.
func TestE2EFairShareSteadyNotRefused(t *testing.T) {
	const cps, seconds = 20, 4
	h, car := fairHarness(t, cps, 2*time.Second, 1, 1)
	caller := siptest.StartCaller(t, "127.0.0.2")
	ctx := ctxT(t, 30*time.Second)
	var steady, burst []int
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); burst = sendPaced(ctx, caller, h.udp, "globex", 3*cps, 3*cps*seconds) }()
	go func() { defer wg.Done(); steady = sendPaced(ctx, caller, h.udp, "acme", 8, 8*seconds) }()
	wg.Wait()
	waitCalls(t, h, "dialer-1", 3*cps*seconds+8*seconds)

	all := car.Arrivals()
	if got := siptest.MaxInWindow(all, time.Second); got > cps {
		t.Errorf("max INVITEs in a rolling second = %d, want <= %d", got, cps)
	}
	if n := count(steady, 486); n != len(steady) {
		t.Errorf("steady customer: %d of %d calls reached the carrier (503: %d); want all", n, len(steady), count(steady, 503))
	}
	if n := len(car.ArrivalsOf("acme-")); n != len(steady) {
		t.Errorf("carrier saw %d of acme's %d calls", n, len(steady))
	}
	if count(burst, 503) == 0 {
		t.Errorf("bursting customer: no 503, want its excess refused")
	}
	t.Logf("burst: %d forwarded, %d refused; steady: %d forwarded", count(burst, 486), count(burst, 503), count(steady, 486))
}
