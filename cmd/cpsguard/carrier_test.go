package main

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/internal/siptest"
)

// `cpsguard carrier unpause NAME` against a running node (issue 22, item
// A5): a carrier two peers got 503 with Retry-After: 600 from is paused
// for the pool, `cpsguard status` shows it, and unpause ends it; the
// command needs the token.
func TestCarrierUnpauseCommand(t *testing.T) {
	car := siptest.StartCarrier(t, "127.0.0.1", func(req *sipmsg.Request) siptest.Answer {
		if req.Recipient.User == "100" {
			return siptest.Answer{Code: 503, Header: []string{"Retry-After: 600"}}
		}
		return siptest.Answer{}
	})
	closed := freePort(t)
	addr, cfgPath, sipAddr := startNodeEdit(t, func(b []byte) []byte {
		b = bytes.Replace(b, []byte(`"sip:127.0.0.1:5070"`), []byte(`"sip:`+car.Addr+`"`), 1)
		return bytes.Replace(b, []byte(`"sip:127.0.0.1:5071;transport=tcp"`), []byte(fmt.Sprintf(`"sip:127.0.0.1:%d;transport=tcp"`, closed)), 1)
	}, "CPSGUARD_HTTP_TOKEN=t0ken")
	waitFor(t, "the node to answer", func() bool {
		return cpsguard(t, nil, "probe", "--addr", addr).code == 0
	})
	tok := []string{"CPSGUARD_HTTP_TOKEN=t0ken"}

	r := cpsguard(t, tok, "carrier", "unpause", "carrier-a", "--config", cfgPath)
	if r.code != 1 || !strings.Contains(r.stderr, "http 404: carrier carrier-a is not paused") {
		t.Errorf("unpause of a carrier not paused: exit %d, stderr %q", r.code, r.stderr)
	}

	// dialer-1 (127.0.0.1) and dialer-2 (127.0.0.2) call carrier-a, then
	// both get its 503 with Retry-After: 600 (dialer-2's first carrier,
	// carrier-b, refuses the connection).
	p1, p2 := siptest.StartCaller(t, "127.0.0.1"), siptest.StartCaller(t, "127.0.0.2")
	for _, user := range []string{"200", "100"} {
		for _, c := range []*siptest.Caller{p1, p2} {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			req := c.Invite(sipAddr)
			req.Recipient.User = user
			res := c.Final(ctx, req)
			cancel()
			if res == nil {
				t.Fatalf("call from %s to %s: no final answer", c.Addr, user)
			}
		}
	}
	if got := car.Count("INVITE"); got != 4 {
		t.Fatalf("carrier-a got %d INVITEs, want 4", got)
	}
	paused := regexp.MustCompile(`carrier carrier-a is (paused until \d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ \(\d+s left\)|half-open \(paused since [^)]*\): one call tries it): Retry-After 600 in a 503 to several peers, paused 1m0s\n`)
	var status result
	waitFor(t, "the carrier paused in the status", func() bool {
		status = cpsguard(t, nil, "status", "--addr", addr)
		return status.code == 0 && paused.MatchString(status.stdout)
	})
	t.Logf("$ cpsguard status\n%s", status.stdout)

	if r := cpsguard(t, nil, "carrier", "unpause", "carrier-a", "--addr", addr); r.code != 1 || !strings.Contains(r.stderr, "http 401: missing bearer token") {
		t.Errorf("unpause without token: exit %d, stderr %q; want 1 and 401", r.code, r.stderr)
	}
	if r := cpsguard(t, tok, "carrier", "unpause", "nobody", "--addr", addr); r.code != 1 || !strings.Contains(r.stderr, "http 404: no such carrier: nobody") {
		t.Errorf("unpause of an unknown carrier: exit %d, stderr %q", r.code, r.stderr)
	}
	r = cpsguard(t, tok, "carrier", "unpause", "carrier-a", "--addr", addr)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "pause lifted: carrier carrier-a was ") || !strings.HasSuffix(r.stdout, "calls go to it again\n") {
		t.Fatalf("unpause: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	t.Logf("$ cpsguard carrier unpause carrier-a\n%s", r.stdout)
	if r := cpsguard(t, nil, "status", "--addr", addr); r.code != 0 || strings.Contains(r.stdout, "carrier carrier-a is") {
		t.Errorf("status after unpause: exit %d, stdout:\n%s", r.code, r.stdout)
	}
	if r := cpsguard(t, nil, "carrier", "unpause"); r.code != 2 {
		t.Errorf("unpause with no name: exit %d, want 2", r.code)
	}
	if r := cpsguard(t, nil, "carrier", "pause", "x"); r.code != 2 {
		t.Errorf("unknown subcommand: exit %d, want 2", r.code)
	}
}

// `cpsguard carrier out|in NAME` against a running node (issue 24, item
// 4): out takes the carrier out of service (status shows it, with the
// reason), in puts it back; both need the token.
func TestCarrierOutInCommand(t *testing.T) {
	addr, _, _ := startNodeEdit(t, nil, "CPSGUARD_HTTP_TOKEN=t0ken")
	waitFor(t, "the node to answer", func() bool {
		return cpsguard(t, nil, "probe", "--addr", addr).code == 0
	})
	tok := []string{"CPSGUARD_HTTP_TOKEN=t0ken"}
	if r := cpsguard(t, nil, "carrier", "out", "carrier-a", "--addr", addr); r.code != 1 || !strings.Contains(r.stderr, "http 401: missing bearer token") {
		t.Errorf("out without token: exit %d, stderr %q; want 1 and 401", r.code, r.stderr)
	}
	if r := cpsguard(t, tok, "carrier", "out", "nobody", "--addr", addr); r.code != 1 || !strings.Contains(r.stderr, "http 404: no such carrier: nobody") {
		t.Errorf("out of an unknown carrier: exit %d, stderr %q", r.code, r.stderr)
	}
	r := cpsguard(t, tok, "carrier", "out", "carrier-a", "--reason", "maintenance window", "--addr", addr)
	if r.code != 0 || r.stdout != "carrier carrier-a is out of service for the pool: calls skip it (maintenance window)\n" {
		t.Fatalf("out: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	t.Logf("$ cpsguard carrier out carrier-a --reason 'maintenance window'\n%s", r.stdout)
	out := regexp.MustCompile(`carrier carrier-a is out of service: since \d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ, by 127\.0\.0\.1:\d+: maintenance window\n`)
	st := cpsguard(t, nil, "status", "--addr", addr)
	if st.code != 0 || !out.MatchString(st.stdout) || !regexp.MustCompile(`(?m)^  carrier-a .* out +\S+$`).MatchString(st.stdout) {
		t.Errorf("status after out: exit %d, stdout:\n%s", st.code, st.stdout)
	}
	t.Logf("$ cpsguard status\n%s", st.stdout)
	r = cpsguard(t, tok, "carrier", "in", "carrier-a", "--addr", addr)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "carrier carrier-a is back in service for the pool (out since ") {
		t.Fatalf("in: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	t.Logf("$ cpsguard carrier in carrier-a\n%s", r.stdout)
	if st := cpsguard(t, nil, "status", "--addr", addr); st.code != 0 || strings.Contains(st.stdout, "out of service") {
		t.Errorf("status after in: exit %d, stdout:\n%s", st.code, st.stdout)
	}
	if r := cpsguard(t, tok, "carrier", "in", "carrier-a", "--addr", addr); r.code != 0 || r.stdout != "carrier carrier-a was in service: nothing changed\n" {
		t.Errorf("in again: exit %d, stdout %q", r.code, r.stdout)
	}
	if r := cpsguard(t, nil, "carrier", "in"); r.code != 2 {
		t.Errorf("in with no name: exit %d, want 2", r.code)
	}
}
