package sip

import (
	"strings"
	"testing"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cpsguard/cpsguard/internal/siptest"
	"github.com/cpsguard/cpsguard/metrics"
)

// callTo places one call from c to user and returns its final answer.
func callTo(t *testing.T, c *siptest.Caller, proxy, user string, headers ...string) *sipmsg.Response {
	t.Helper()
	req := c.Invite(proxy, headers...)
	req.Recipient.User = user
	return c.Final(ctxT(t, 10*time.Second), req)
}

// codeOf is a response's status, 0 for none.
func codeOf(r *sipmsg.Response) int {
	if r == nil {
		return 0
	}
	return r.StatusCode
}

func admissions(h *harness, scope, name, result string) int {
	return int(testutil.ToFloat64(h.m.Admission.WithLabelValues(scope, name, result)))
}

// destinationsYAML: generous peers and carriers; the limits are the
// destinations'. Carrier b is route uk's.
const destinationsYAML = `
node_id: dest
sip: {listen: ["udp://127.0.0.1:0", "tcp://127.0.0.1:0"]}
store: {key_prefix: dest}
log: {level: info, format: text}
peers:
  - {name: dialer-1, sources: [127.0.0.2/32], cps: 1000, customer: acme, customers: [acme]}
  - {name: dialer-2, sources: [127.0.0.3/32], cps: 1000, customer: acme, customers: [acme]}
customers: [{name: acme, cps: 1000}]
carriers:
  - {name: a, uri: "sip:%CARRIER%", cps: 1000, max_wait: 1s, probe: {interval: 0s}}
  - {name: b, uri: "sip:%CARRIER_B%", cps: 1000, max_wait: 1s, probe: {interval: 0s}}
routes: {default: [a], uk: [b]}
destinations:
  - {prefix: "+44", windows: [{calls: 10, per: 1m}], route: uk}
  - {prefix: "44-20", windows: [{calls: 3, per: 1m}], reject: {code: 403, reason: Destination Barred}}
  - {prefix: "1900", max_calls: 2}
`

// Item 3: destination limits by called-number prefix, pool-wide (two
// peers share them), the longest prefix winning ('+' ignored), each with
// its own answer; a destination's route before the peer's; max_calls per
// destination.
func TestE2EDestinationLimits(t *testing.T) {
	carA := siptest.StartCarrier(t, "127.0.0.1", nil)
	carB := siptest.StartCarrier(t, "127.0.0.1", nil)
	h := startRedisProxy(t, strings.ReplaceAll(destinationsYAML, "%CARRIER_B%", carB.Addr), carA)
	c1, c2 := siptest.StartCaller(t, "127.0.0.2"), siptest.StartCaller(t, "127.0.0.3")

	// London (4420): 3 a minute, whoever calls, with or without '+'.
	var london []int
	for i := range 6 {
		c, user := c1, "+442079460000"
		if i%2 == 1 {
			c, user = c2, "4420-7946-0001"
		}
		r := callTo(t, c, h.udp, user)
		london = append(london, codeOf(r))
		if codeOf(r) == 403 && r.Reason != "Destination Barred" {
			t.Errorf("a refused call to 4420: reason %q, want Destination Barred", r.Reason)
		}
	}
	if got := countCodes(london); got[200] != 3 || got[403] != 3 {
		t.Errorf("6 calls to 4420 from two peers: %v, want 3 × 200, 3 × 403", got)
	}
	// The rest of +44: 10 a minute, on route uk (carrier b); London's calls
	// went to the default route (its own entry names none) and are not
	// counted here.
	var uk []int
	for range 12 {
		uk = append(uk, codeOf(callTo(t, c1, h.udp, "+441632960000")))
	}
	if got := countCodes(uk); got[200] != 10 || got[503] != 2 {
		t.Errorf("12 calls to +44 (not 4420): %v, want 10 × 200, 2 × 503", got)
	}
	if a, b := len(carA.Invites()), len(carB.Invites()); a != 3 || b != 10 {
		t.Errorf("INVITEs at carrier a (default) and b (uk): %d and %d, want 3 and 10", a, b)
	}
	// Premium (1900): 2 calls at once; answered calls hold their places.
	var prem []int
	for range 3 {
		prem = append(prem, codeOf(callTo(t, c2, h.udp, "19005550100")))
	}
	if got := countCodes(prem); got[200] != 2 || got[503] != 1 {
		t.Errorf("3 answered calls to 1900 (max_calls 2): %v, want 2 × 200, 1 × 503", got)
	}
	waitFor(t, func() bool {
		return calls(h.harness, "dialer-1", metrics.OutcomeRejectedDestination)+calls(h.harness, "dialer-2", metrics.OutcomeRejectedDestination) == 6
	}, "6 calls counted rejected_destination")
	if got := admissions(h.harness, metrics.ScopeDestination, "44-20", metrics.ResultRejected); got != 3 {
		t.Errorf("admission_total{destination,44-20,rejected}: got %d, want 3", got)
	}
	if got := admissions(h.harness, metrics.ScopeDestination, "+44", metrics.ResultAdmitted); got != 10 {
		t.Errorf("admission_total{destination,+44,admitted}: got %d, want 10", got)
	}
	// A number matching no destination has no destination limit.
	if r := callTo(t, c1, h.udp, "3312345"); codeOf(r) != 200 {
		t.Errorf("a call matching no destination: got %v, want 200", r)
	}
}

// Item 3: repeat_dial: at most 3 calls to one number a minute, pool-wide
// ('+' ignored, any peer), answered 486 Busy Here with its reason,
// outcome rejected_repeat; other numbers are not affected; a priority
// number is never refused by it.
func TestE2ERepeatDial(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	yaml := strings.Replace(destinationsYAML, "destinations:", "repeat_dial: {calls: 3, per: 1m}\npriority: {numbers: [\"112\"]}\ndestinations:", 1)
	h := startRedisProxy(t, strings.ReplaceAll(yaml, "%CARRIER_B%", car.Addr), car)
	c1, c2 := siptest.StartCaller(t, "127.0.0.2"), siptest.StartCaller(t, "127.0.0.3")

	var got []int
	for i, user := range []string{"5550100", "+5550100", "555-0100", "5550100", "+5550100"} {
		c := c1
		if i%2 == 1 {
			c = c2
		}
		r := callTo(t, c, h.udp, user)
		got = append(got, codeOf(r))
		if codeOf(r) == 486 && r.Reason != "Repeat Dial Limit" {
			t.Errorf("a refused repeat: reason %q, want Repeat Dial Limit", r.Reason)
		}
	}
	if want := []int{200, 200, 200, 486, 486}; !slicesEqual(got, want) {
		t.Errorf("5 calls to one number from two peers: %v, want %v", got, want)
	}
	if r := callTo(t, c1, h.udp, "5550101"); codeOf(r) != 200 {
		t.Errorf("a call to another number: got %v, want 200", r)
	}
	for range 5 {
		if r := callTo(t, c2, h.udp, "112"); codeOf(r) != 200 {
			t.Errorf("a call to 112 past repeat_dial: got %v, want 200", r)
		}
	}
	waitFor(t, func() bool {
		return calls(h.harness, "dialer-1", metrics.OutcomeRejectedRepeat)+calls(h.harness, "dialer-2", metrics.OutcomeRejectedRepeat) == 2
	}, "2 calls counted rejected_repeat")
	if got := admissions(h.harness, metrics.ScopeRepeatDial, "", metrics.ResultRejected); got != 2 {
		t.Errorf("admission_total{repeat_dial,rejected}: got %d, want 2", got)
	}
}

// Item 3: shadow and the refusal answer per limit: dialer-1's limits are
// shadowed (counted shadow_rejected, calls admitted) while dialer-2's,
// the same, are enforced with an answer of their own; a shadowed
// destination and repeat_dial admit too.
func TestE2EShadowAndRejectPerLimit(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", nil)
	const yaml = `
node_id: shadow
sip: {listen: ["udp://127.0.0.1:0", "tcp://127.0.0.1:0"]}
store: {key_prefix: shadow}
log: {level: info, format: text}
peers:
  - {name: dialer-1, sources: [127.0.0.2/32], cps: 1000, windows: [{calls: 3, per: 1m}], max_calls: 1,
     customer: acme, customers: [acme], shadow: true}
  - {name: dialer-2, sources: [127.0.0.3/32], cps: 1000, windows: [{calls: 3, per: 1m}],
     customer: acme, customers: [acme], reject: {code: 486, reason: Over Contract, retry_after: 5s}}
customers: [{name: acme, cps: 1000}]
carriers: [{name: a, uri: "sip:%CARRIER%", cps: 1000, max_wait: 1s, probe: {interval: 0s}}]
routes: {default: [a]}
destinations: [{prefix: "1800", windows: [{calls: 1, per: 1m}], shadow: true}]
repeat_dial: {calls: 1, per: 1m, shadow: true}
`
	h := startRedisProxy(t, yaml, car)
	c1, c2 := siptest.StartCaller(t, "127.0.0.2"), siptest.StartCaller(t, "127.0.0.3")

	var shadowed, enforced []int
	for range 6 {
		shadowed = append(shadowed, codeOf(callTo(t, c1, h.udp, "18005550100")))
	}
	for i := range 6 {
		r := callTo(t, c2, h.udp, "3312345")
		enforced = append(enforced, codeOf(r))
		if i >= 3 {
			if ra := r.GetHeader("Retry-After"); r.Reason != "Over Contract" || ra == nil || ra.Value() != "5" {
				t.Errorf("dialer-2's refusal: %q, Retry-After %v; want Over Contract, 5", r.Reason, ra)
			}
		}
	}
	if got := countCodes(shadowed); got[200] != 6 {
		t.Errorf("6 calls of the shadowed peer (over its window, max_calls, destination, repeat_dial): %v, want 6 × 200", got)
	}
	if got := countCodes(enforced); got[200] != 3 || got[486] != 3 {
		t.Errorf("6 calls of the enforced peer: %v, want 3 × 200, 3 × 486", got)
	}
	for _, tc := range []struct {
		scope, name, result string
		want                int
	}{
		{metrics.ScopePeer, "dialer-1", metrics.ResultAdmitted, 3},
		// 3 over its minute window, and 5 over its max_calls of 1 (the
		// answered calls stay up).
		{metrics.ScopePeer, "dialer-1", metrics.ResultShadowRejected, 3 + 5},
		{metrics.ScopeDestination, "1800", metrics.ResultShadowRejected, 5},
		// Both numbers, past their first call (dialer-2's refused calls
		// were over it too).
		{metrics.ScopeRepeatDial, "", metrics.ResultShadowRejected, 10},
		{metrics.ScopePeer, "dialer-2", metrics.ResultRejected, 3},
		{metrics.ScopePeer, "dialer-2", metrics.ResultShadowRejected, 0},
	} {
		if got := admissions(h.harness, tc.scope, tc.name, tc.result); got != tc.want {
			t.Errorf("admission_total{%s,%s,%s}: got %d, want %d", tc.scope, tc.name, tc.result, got, tc.want)
		}
	}
	if got := calls(h.harness, "dialer-1", metrics.OutcomeForwarded); got != 6 {
		t.Errorf("dialer-1 forwarded: got %d, want 6", got)
	}
}

func slicesEqual(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
