package sip

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/siptest"
	"github.com/cpsguard/cpsguard/policy"

	"github.com/cpsguard/cpsguard/internal/testlog"
)

// lockedBuffer is a bytes.Buffer safe for the proxy's goroutines.
type lockedBuffer struct{ testlog.Buffer }

// events returns the JSON lines whose msg starts with "call ".
func (l *lockedBuffer) events(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(l.String(), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if msg, _ := m["msg"].(string); strings.HasPrefix(msg, "call ") {
			out = append(out, m)
		}
	}
	return out
}

// Every call not forwarded on its first try gets one event line with what
// an operator asks of it (issue 14): who, to which number, why, what answer.
func TestEventLines(t *testing.T) {
	a := siptest.StartCarrier(t, "127.0.0.1", nil)
	b := siptest.StartCarrier(t, "127.0.0.1", nil)
	failing := siptest.StartCarrier(t, "127.0.0.1", func(*sipmsg.Request) siptest.Answer { return siptest.Answer{Code: 503} })
	adm, pacer := newFakes()
	cfg := testConfig(carrierCfg("a", a), carrierCfg("b", b))
	cfg.Log.Events, cfg.Log.EventsPerSecond = true, 100
	var buf lockedBuffer
	h := startProxyOpts(t, Options{Config: func() *config.Config { return cfg }, Admission: adm, Pacer: pacer,
		Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
	caller := siptest.StartCaller(t, "127.0.0.2")

	// 1. Forwarded on the first try: no line.
	if res := caller.Final(ctxT(t, 5*time.Second), caller.Invite(h.udp)); res == nil || res.StatusCode != 200 {
		t.Fatalf("first call: %v", res)
	}
	// 2. Carrier a full: rerouted to b.
	pacer.mu.Lock()
	pacer.full[policy.Key("t", policy.ScopeCarrier, "a")] = true
	pacer.mu.Unlock()
	if res := caller.Final(ctxT(t, 5*time.Second), caller.Invite(h.udp)); res == nil || res.StatusCode != 200 {
		t.Fatalf("rerouted call: %v", res)
	}
	// 3. The customer over its CPS limit (bucket 1: the customer's).
	adm.mu.Lock()
	adm.refuse = 1
	adm.mu.Unlock()
	if res := caller.Final(ctxT(t, 5*time.Second), caller.Invite(h.udp)); res == nil || res.StatusCode != 503 {
		t.Fatalf("refused call: %v", res)
	}

	// 4. On a second proxy, admitted but its only carrier answers 503.
	adm2, pacer2 := newFakes()
	cfg2 := testConfig(carrierCfg("f", failing))
	cfg2.Log.Events, cfg2.Log.EventsPerSecond = true, 100
	var buf2 lockedBuffer
	h2 := startProxyOpts(t, Options{Config: func() *config.Config { return cfg2 }, Admission: adm2, Pacer: pacer2,
		Logger: slog.New(slog.NewJSONHandler(&buf2, nil))})
	if res := caller.Final(ctxT(t, 5*time.Second), caller.Invite(h2.udp)); res == nil || res.StatusCode != 503 {
		t.Fatalf("call no carrier took: %v, want the carrier's 503 relayed", res)
	}
	var ev2 []map[string]any
	waitFor(t, func() bool { ev2 = buf2.events(t); return len(ev2) >= 1 }, "the failed call's line")
	if r, _ := ev2[0]["reason"].(string); len(ev2) != 1 || r != "carrier_failed" || ev2[0]["msg"] != "call rejected" || ev2[0]["code"] != float64(503) {
		t.Errorf("every carrier failed: lines %v, want one: call rejected, carrier_failed, code 503", ev2)
	}

	var ev []map[string]any
	waitFor(t, func() bool { ev = buf.events(t); return len(ev) >= 2 }, "two event lines")
	if len(ev) != 2 {
		t.Fatalf("got %d event lines, want 2 (none for the call forwarded first time): %v", len(ev), ev)
	}
	// The rerouted call's line is written when its handler returns, which
	// may come after the refused call's: find each by its message.
	re, rj := ev[0], ev[1]
	if re["msg"] == "call rejected" {
		re, rj = rj, re
	}
	for _, c := range []struct {
		line      map[string]any
		key, want string
	}{
		{re, "msg", "call rerouted"},
		{re, "reason", "rerouted"},
		{re, "carrier", "b"},
		{re, "peer", "dialer-1"},
		{re, "customer", "acme"},
		{re, "outcome", "forwarded"},
		{rj, "msg", "call rejected"},
		{rj, "reason", "customer_cps"},
		{rj, "outcome", "rejected_cps"},
		{rj, "customer", "acme"},
	} {
		if got, _ := c.line[c.key].(string); got != c.want {
			t.Errorf("%s line: %s = %q, want %q (line %v)", c.line["msg"], c.key, got, c.want, c.line)
		}
	}
	if d, _ := re["detail"].(string); !strings.HasPrefix(d, "a: full") {
		t.Errorf("rerouted line: detail %q, want it to say carrier a was full", d)
	}
	if code, _ := rj["code"].(float64); code != 503 {
		t.Errorf("rejected line: code %v, want 503", rj["code"])
	}
	for _, line := range ev {
		for _, k := range []string{"call_id", "source", "to_user"} {
			if v, _ := line[k].(string); v == "" {
				t.Errorf("%s line: no %s (%v)", line["msg"], k, line)
			}
		}
	}
	if d, _ := rj["detail"].(string); !strings.HasPrefix(d, "customer acme:") {
		t.Errorf("rejected line: detail %q, want the customer's bucket", d)
	}
}

// The event lines are capped per second; the lines over the cap are
// counted and the count logged when the bucket allows again.
func TestEventRateLimit(t *testing.T) {
	var e eventLog
	now := time.Unix(1000, 0)
	allowed := 0
	for range 5 {
		if ok, _ := e.allow(now, 2); ok {
			allowed++
		}
	}
	if allowed != 2 {
		t.Fatalf("allowed %d of 5 at once with 2 a second, want 2", allowed)
	}
	ok, suppressed := e.allow(now.Add(600*time.Millisecond), 2)
	if !ok || suppressed != 3 {
		t.Fatalf("600 ms later: ok %v, suppressed %d; want the next line and a count of 3", ok, suppressed)
	}
	var buf lockedBuffer
	e.log = slog.New(slog.NewJSONHandler(&buf, nil))
	e.allow(now.Add(600*time.Millisecond), 2)
	e.allow(now.Add(600*time.Millisecond), 2)
	e.flush()
	if !strings.Contains(buf.String(), `"msg":"call events suppressed","count":2`) {
		t.Errorf("flush wrote %q, want a count of 2 (0.2 token left after the 600 ms refill)", buf.String())
	}
}

// TestPhraseEscapesFormatControls: a reason phrase a carrier or a peer
// chose reaches logs, the health reason and the status table only with
// its controls escaped: C0 and C1, and Unicode format characters (a
// right-to-left override would reorder the rest of the log line).
func TestPhraseEscapesFormatControls(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"plain", "Service Unavailable", "Service Unavailable"},
		{"right-to-left override", "Busy \u202eereH", `Busy \u202eereH`},
		{"bidi isolates", "a\u2066b\u2069", `a\u2066b\u2069`},
		{"zero-width joiner and space", "a\u200db\u200b", `a\u200db\u200b`},
		{"byte-order mark", "\ufeffOK", `\ufeffOK`},
		{"line separator", "a\u2028b", `a\u2028b`},
		{"C0: CR LF, ESC", "OK\r\n\x1b[2J", `OK\u000d\u000a\u001b[2J`},
		{"C1: CSI", "a\u009b31m", `a\u009b31m`},
		{"accents kept", "Numéro indisponible", "Numéro indisponible"},
	} {
		if got := phrase(tc.in); got != tc.want {
			t.Errorf("%s: phrase(%q) = %q, want %q", tc.name, tc.in, got, tc.want)
		}
	}
}

// TestLogsEscapeUntrustedText: a carrier's reason phrase with a
// right-to-left override reaches the proxy's log line (the rerouted call's
// event) escaped, never raw.
func TestLogsEscapeUntrustedText(t *testing.T) {
	failing := siptest.StartCarrier(t, "127.0.0.1", func(*sipmsg.Request) siptest.Answer {
		return siptest.Answer{Code: 503, Reason: "Over\u202edaol"}
	})
	ok := siptest.StartCarrier(t, "127.0.0.1", nil)
	adm, pacer := newFakes()
	cfg := testConfig(carrierCfg("f", failing), carrierCfg("b", ok))
	cfg.Log.Events, cfg.Log.EventsPerSecond = true, 100
	var buf lockedBuffer
	h := startProxyOpts(t, Options{Config: func() *config.Config { return cfg }, Admission: adm, Pacer: pacer,
		Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
	caller := siptest.StartCaller(t, "127.0.0.2")
	if res := caller.Final(ctxT(t, 5*time.Second), caller.Invite(h.udp)); res == nil || res.StatusCode != 200 {
		t.Fatalf("call: %v, want the second carrier's 200", res)
	}
	var ev []map[string]any
	waitFor(t, func() bool { ev = buf.events(t); return len(ev) >= 1 }, "the rerouted call's line")
	d, _ := ev[0]["detail"].(string)
	if !strings.Contains(d, `Over\u202edaol`) {
		t.Errorf("rerouted line: detail %q, want the carrier's reason with its override escaped", d)
	}
	raw := buf.String()
	if strings.Contains(raw, "\u202e") {
		t.Errorf("a raw U+202E reached the log:\n%s", raw)
	}
}
