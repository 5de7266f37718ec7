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
