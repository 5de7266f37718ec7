package main

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cpsguard/cpsguard/internal/redistest"
)

// `cpsguard limit set|ls|rm` against a running node: the token is needed,
// the override shows in ls and status, and rm restores the configured cps.
func TestLimitCommand(t *testing.T) {
	addr, cfgPath := startNodeEnv(t, "CPSGUARD_HTTP_TOKEN=t0ken")
	waitFor(t, "the node to answer", func() bool {
		return cpsguard(t, nil, "probe", "--addr", addr).code == 0
	})
	r := cpsguard(t, nil, "limit", "set", "peer", "dialer-1", "--cps", "20", "--ttl", "1h", "--addr", addr)
	if r.code != 1 || !strings.Contains(r.stderr, "http 401: missing bearer token (give the node's http.token with --token or CPSGUARD_HTTP_TOKEN)") {
		t.Errorf("set without token: exit %d, stderr %q; want 1, 401 and how to give the token", r.code, r.stderr)
	}
	tok := []string{"CPSGUARD_HTTP_TOKEN=t0ken"}
	r = cpsguard(t, tok, "limit", "set", "peer", "nobody", "--cps", "20", "--ttl", "1h", "--config", cfgPath)
	if r.code != 1 || !strings.Contains(r.stderr, `peer "nobody" is not configured`) {
		t.Errorf("set of an unknown peer: exit %d, stderr %q", r.code, r.stderr)
	}
	r = cpsguard(t, tok, "limit", "set", "peer", "dialer-1", "--cps", "0", "--config", cfgPath)
	if r.code != 2 || !strings.Contains(r.stderr, "--cps must be a number > 0") || !strings.Contains(r.stderr, "--ttl is required") {
		t.Errorf("set with no cps and no ttl: exit %d, stderr %q; want both errors", r.code, r.stderr)
	}
	r = cpsguard(t, tok, "limit", "set", "peer", "dialer-1", "--cps", "20", "--ttl", "1h", "--config", cfgPath)
	line := regexp.MustCompile(`^override set: peer dialer-1 cps 20 \(configured 50\) until \d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ \((1h0m0s|59m5\ds) left\), set by 127\.0\.0\.1:\d+\n$`)
	if r.code != 0 || !line.MatchString(r.stdout) {
		t.Errorf("set: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	t.Logf("$ cpsguard limit set peer dialer-1 --cps 20 --ttl 1h\n%s", r.stdout)

	r = cpsguard(t, nil, "limit", "ls", "--addr", addr)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "peer dialer-1 cps 20 (configured 50) until ") {
		t.Errorf("ls: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	t.Logf("$ cpsguard limit ls\n%s", r.stdout)
	r = cpsguard(t, nil, "status", "--addr", addr)
	if r.code != 0 || !regexp.MustCompile(`(?m)^  dialer-1\s+20\*`).MatchString(r.stdout) || !strings.Contains(r.stdout, "* override: peer dialer-1 cps 20") {
		t.Errorf("status: exit %d, stdout:\n%s", r.code, r.stdout)
	}
	t.Logf("$ cpsguard status\n%s", r.stdout)

	r = cpsguard(t, tok, "limit", "rm", "peer", "dialer-1", "--addr", addr)
	if r.code != 0 || !strings.Contains(r.stdout, "override removed: peer dialer-1 cps 20") ||
		!strings.Contains(r.stdout, "peer dialer-1 is back at its configured cps 50\n") {
		t.Errorf("rm: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	t.Logf("$ cpsguard limit rm peer dialer-1\n%s", r.stdout)
	r = cpsguard(t, nil, "limit", "ls", "--addr", addr)
	if r.code != 0 || r.stdout != "no limit overrides\n" {
		t.Errorf("ls after rm: exit %d, stdout %q", r.code, r.stdout)
	}
	if r := cpsguard(t, nil, "limit", "set", "peer"); r.code != 2 {
		t.Errorf("set with one argument: exit %d, want 2", r.code)
	}
	// Usage errors are told before any request (no node at this address).
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"set", "peer", "dialer-1", "--ttl", "1h"}, "--cps must be a number > 0 (got 0)"},
		{[]string{"set", "peer", "dialer-1", "--cps", "NaN", "--ttl", "1h"}, "--cps must be a number > 0 (got NaN)"},
		{[]string{"set", "peer", "dialer-1", "--cps", "5"}, "--ttl is required"},
		{[]string{"set", "peers", "dialer-1", "--cps", "5", "--ttl", "1h"}, `scope must be peer, customer or carrier (got "peers")`},
		{[]string{"rm", "carier", "a"}, `scope must be peer, customer or carrier (got "carier")`},
	} {
		r := cpsguard(t, nil, append([]string{"limit"}, append(tc.args, "--addr", "http://127.0.0.1:1")...)...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("limit %q: exit %d, stderr %q; want 2 and %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
}

// `cpsguard limit -h` and `cpsguard carrier -h` list the flags of every
// subcommand, not only the subcommands (each subcommand's own -h did, the
// group's help did not).
func TestGroupHelpListsFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"limit", "-h"}, []string{"-addr URL", "-config file", "-token token", "Flags of cpsguard limit set:", "-cps float", "-ttl string", "-burst int"}},
		{[]string{"help", "limit"}, []string{"-token token", "-cps float"}},
		{[]string{"carrier", "-h"}, []string{"-addr URL", "-config file", "-token token", "Flags of cpsguard carrier out:", "-reason text"}},
		{[]string{"carrier", "help"}, []string{"-token token", "-reason text"}},
	} {
		r := cpsguard(t, nil, tc.args...)
		if r.code != 0 {
			t.Errorf("%q: exit %d, want 0", tc.args, r.code)
		}
		for _, w := range tc.want {
			if !strings.Contains(r.stdout, w) {
				t.Errorf("%q: help lacks %q:\n%s", tc.args, w, r.stdout)
			}
		}
	}
}

// The limit overrides' store calls wait for no SIP call (calls read the
// node's snapshot), so they are bounded like the heartbeat, not by
// store.redis.timeout: with Redis 30 ms of round trip away and that
// timeout at 50 ms, a `limit set` that needed a new connection (HELLO,
// then the script: 60 ms) failed with 503, and the refresh's reads
// failed and recovered again and again (h60).
func TestLimitCommandWithADistantRedis(t *testing.T) {
	srv := redistest.Start(t)
	addr := redistest.Delayed(t, srv.Addr(), 15*time.Millisecond)
	http, cfgPath := startNodeEnv(t, "CPSGUARD_HTTP_TOKEN=t0ken", "CPSGUARD_STORE_REDIS_ADDRS="+addr, "CPSGUARD_STORE_REDIS_TIMEOUT=50ms")
	waitFor(t, "the node to answer", func() bool {
		return cpsguard(t, nil, "probe", "--addr", http).code == 0
	})
	tok := []string{"CPSGUARD_HTTP_TOKEN=t0ken"}
	for i := range 3 {
		// Redis (or a load balancer) closed the node's connections.
		if out, err := srv.CLI(t.Context(), "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"); err != nil {
			t.Fatalf("client kill: %v %s", err, out)
		}
		time.Sleep(50 * time.Millisecond) // the closes reach the node
		r := cpsguard(t, tok, "limit", "set", "peer", "dialer-1", "--cps", strconv.Itoa(20+i), "--ttl", "1h", "--config", cfgPath)
		if r.code != 0 || !strings.HasPrefix(r.stdout, "override set: peer dialer-1 cps "+strconv.Itoa(20+i)) {
			t.Fatalf("set %d with Redis 30 ms away, on a new connection: exit %d, stdout %q, stderr %q", i, r.code, r.stdout, r.stderr)
		}
	}
}
