package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/redistest"
	"github.com/cpsguard/cpsguard/limits"

	"github.com/cpsguard/cpsguard/internal/testlog"
)

// logSink is a log sink safe for the server's goroutines.
type logSink struct{ testlog.Buffer }

func (s *logSink) lines() []map[string]any {
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(s.String()), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

func limitsServer(t *testing.T, cfg *atomic.Pointer[config.Config], lim Limiter) (string, *logSink) {
	t.Helper()
	logs := &logSink{}
	h := New(Options{
		Config: cfg.Load, Counts: newFake(), Queue: newFake(), Limits: lim,
		Logger: slog.New(slog.NewJSONHandler(logs, nil)),
	})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL, logs
}

func TestLimitsRoundTrip(t *testing.T) {
	var cfg atomic.Pointer[config.Config]
	c := testConfig()
	c.HTTP.Token = "s3cret"
	c.Peers[0].Burst = 100
	cfg.Store(c)
	lim := limits.New(limits.NewLocalStore(nil), limits.Options{})
	base, logs := limitsServer(t, &cfg, lim)
	ctx := context.Background()

	// No token, wrong token: 401, nothing set.
	for _, tok := range []string{"", "wrong"} {
		_, err := SetLimit(ctx, base, tok, "peer", "dialer-1", LimitRequest{CPS: 20, TTL: "1h"})
		var e *Error
		if !errors.As(err, &e) || e.Code != http.StatusUnauthorized {
			t.Errorf("PUT with token %q: got %v, want a 401", tok, err)
		}
	}
	if got := lim.List(); len(got) != 0 {
		t.Fatalf("overrides after refused PUTs = %v, want none", got)
	}

	res, err := SetLimit(ctx, base, "s3cret", "peer", "dialer-1", LimitRequest{CPS: 20, TTL: "1h"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != "set" || res.Override == nil || res.Override.CPS != 20 || res.Override.ConfiguredCPS != 50 ||
		res.Override.ConfiguredBurst != 100 || res.Previous != nil || res.Override.TTLSeconds < 3599 {
		t.Errorf("PUT answer = %+v (override %+v), want set cps 20, configured 50 burst 100, 1h left, no previous", res, res.Override)
	}
	if o, ok := lim.Lookup("peer", "dialer-1"); !ok || o.CPS != 20 || !strings.HasPrefix(o.SetBy, "127.0.0.1:") {
		t.Errorf("Lookup after PUT = %+v, %v; want cps 20 set by 127.0.0.1", o, ok)
	}

	// The audit line: who, what, before -> after, until.
	var audit map[string]any
	for _, l := range logs.lines() {
		if l["msg"] == "limit override set" {
			audit = l
		}
	}
	if audit == nil {
		t.Fatalf("no audit line in %v", logs.lines())
	}
	for k, want := range map[string]any{"level": "INFO", "scope": "peer", "name": "dialer-1", "before_cps": 50.0, "after_cps": 20.0,
		"before_burst": 100.0, "after_burst": 100.0, "ttl": "1h0m0s"} {
		if audit[k] != want {
			t.Errorf("audit %s = %v, want %v (line %v)", k, audit[k], want, audit)
		}
	}
	if r, _ := audit["remote"].(string); !strings.HasPrefix(r, "127.0.0.1:") {
		t.Errorf("audit remote = %v, want the client's address", audit["remote"])
	}
	if u, _ := audit["until"].(string); u == "" {
		t.Errorf("audit has no until: %v", audit)
	}

	// Replacing it reports the previous one; status shows the one in force.
	res, err = SetLimit(ctx, base, "s3cret", "peer", "dialer-1", LimitRequest{CPS: 10, Burst: new(int), TTL: "30m"})
	if err != nil || res.Previous == nil || res.Previous.CPS != 20 {
		t.Fatalf("second PUT = %+v, %v; want previous cps 20", res, err)
	}
	st, err := FetchStatus(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	if p := st.Peers[0]; p.LimitCPS != 10 || p.Override == nil || p.Override.CPS != 10 || p.Override.Burst == nil || *p.Override.Burst != 0 {
		t.Errorf("status peer = %+v (override %+v), want limit_cps 10 with its override", p, p.Override)
	}
	if p := st.Peers[1]; p.Override != nil || p.LimitCPS != 0.5 {
		t.Errorf("status peer 2 = %+v, want no override", p)
	}
	var table bytes.Buffer
	_ = RenderStatus(&table, st)
	if !strings.Contains(table.String(), "10*") || !strings.Contains(table.String(), "* override: peer dialer-1 cps 10 burst 0 (configured 50 burst 100) until ") {
		t.Errorf("status table lacks the override:\n%s", table.String())
	}

	list, err := FetchLimits(ctx, base)
	if err != nil || len(list.Overrides) != 1 || list.Overrides[0].Name != "dialer-1" || list.Overrides[0].Ignored != "" {
		t.Fatalf("GET limits = %+v, %v; want dialer-1", list, err)
	}

	// A reload that drops the name keeps the override, ignored.
	c2 := testConfig()
	c2.HTTP.Token = "s3cret"
	c2.Peers = c2.Peers[1:]
	cfg.Store(c2)
	list, _ = FetchLimits(ctx, base)
	if len(list.Overrides) != 1 || !strings.Contains(list.Overrides[0].Ignored, "not configured") {
		t.Errorf("GET limits after the name left the config = %+v, want it listed as ignored", list)
	}
	cfg.Store(c)

	res, err = RemoveLimit(ctx, base, "s3cret", "peer", "dialer-1")
	if err != nil || res.Status != "removed" || res.Previous == nil || res.Previous.CPS != 10 {
		t.Fatalf("DELETE = %+v, %v", res, err)
	}
	if _, ok := lim.Lookup("peer", "dialer-1"); ok {
		t.Error("override still live after DELETE")
	}
	_, err = RemoveLimit(ctx, base, "s3cret", "peer", "dialer-1")
	var e *Error
	if !errors.As(err, &e) || e.Code != http.StatusNotFound {
		t.Errorf("second DELETE: got %v, want 404", err)
	}
	found := false
	for _, l := range logs.lines() {
		if l["msg"] == "limit override removed" && l["before_cps"] == 10.0 && l["after_cps"] == 50.0 {
			found = true
		}
	}
	if !found {
		t.Errorf("no audit line for the DELETE in %v", logs.lines())
	}
}

func TestLimitsValidation(t *testing.T) {
	var cfg atomic.Pointer[config.Config]
	c := testConfig()
	c.HTTP.Token = "s3cret"
	cfg.Store(c)
	lim := limits.New(limits.NewLocalStore(nil), limits.Options{})
	base, _ := limitsServer(t, &cfg, lim)
	for _, tc := range []struct {
		name, path, body string
		code             int
		want             string
	}{
		{"unknown scope", "/api/v1/limits/route/x", `{"cps":1,"ttl":"1h"}`, 404, `no such scope "route"`},
		{"unknown name", "/api/v1/limits/peer/nobody", `{"cps":1,"ttl":"1h"}`, 404, `peer "nobody" is not configured`},
		{"cps zero and no ttl", "/api/v1/limits/peer/dialer-1", `{"cps":0}`, 400, "cps: must be > 0"},
		{"no ttl", "/api/v1/limits/peer/dialer-1", `{"cps":5}`, 400, "ttl: required"},
		{"cps too high", "/api/v1/limits/carrier/carrier-a", `{"cps":100001,"ttl":"1h"}`, 400, "cps: must be <= 100000"},
		{"ttl too long", "/api/v1/limits/customer/acme", `{"cps":5,"ttl":"721h"}`, 400, "ttl: must be at most 30d"},
		{"ttl negative", "/api/v1/limits/customer/acme", `{"cps":5,"ttl":"-1m"}`, 400, "ttl: must be at least 1s"},
		{"ttl shorter than the nodes' refresh", "/api/v1/limits/carrier/carrier-a", `{"cps":5,"ttl":"1ns"}`, 400, "ttl: must be at least 1s"},
		{"a key twice", "/api/v1/limits/carrier/carrier-a", `{"cps":5,"ttl":"1h","cps":1000}`, 400, `the key "cps" is given twice`},
		{"a key twice in another case", "/api/v1/limits/carrier/carrier-a", `{"cps":5,"ttl":"1h","CPS":1000}`, 400, `the key "CPS" is given twice`},
		{"data after the object", "/api/v1/limits/carrier/carrier-a", `{"cps":5,"ttl":"1h"}{"cps":1}`, 400, "want one JSON object, and nothing after it"},
		{"ttl not a duration", "/api/v1/limits/customer/acme", `{"cps":5,"ttl":"soon"}`, 400, `ttl: "soon" is not a duration`},
		{"ttl in days too long", "/api/v1/limits/customer/acme", `{"cps":5,"ttl":"31d"}`, 400, "ttl: must be at most 30d"},
		{"burst on a carrier", "/api/v1/limits/carrier/carrier-a", `{"cps":5,"burst":10,"ttl":"1h"}`, 400, "burst: not supported on carriers"},
		{"burst below cps", "/api/v1/limits/peer/dialer-1", `{"cps":5,"burst":2,"ttl":"1h"}`, 400, "burst: must be 0 (no burst) or >= cps 5"},
		{"max_calls", "/api/v1/limits/peer/dialer-1", `{"cps":5,"max_calls":3,"ttl":"1h"}`, 400, "max_calls: not supported"},
		{"unknown field", "/api/v1/limits/peer/dialer-1", `{"cps":5,"tll":"1h"}`, 400, `unknown field "tll"`},
		{"not JSON", "/api/v1/limits/peer/dialer-1", `cps=5`, 400, "body: want JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPut, base+tc.path, strings.NewReader(tc.body))
			req.Header.Set("Authorization", "Bearer s3cret")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var e Error
			_ = json.NewDecoder(resp.Body).Decode(&e)
			e.Code = resp.StatusCode
			if resp.StatusCode != tc.code || !strings.Contains(e.Error(), tc.want) {
				t.Errorf("got %d %q, want %d containing %q", resp.StatusCode, e.Error(), tc.code, tc.want)
			}
		})
	}
	if got := lim.List(); len(got) != 0 {
		t.Errorf("overrides after invalid requests = %v, want none", got)
	}
	// Methods.
	req, _ := http.NewRequest(http.MethodPost, base+"/api/v1/limits/peer/dialer-1", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 || resp.Header.Get("Allow") != "PUT, DELETE" {
		t.Errorf("POST: got %d Allow %q, want 405 PUT, DELETE", resp.StatusCode, resp.Header.Get("Allow"))
	}
}

// TestLimitsStoreDown: with Redis unreachable a PUT changes nothing and
// says so (503).
func TestLimitsStoreDown(t *testing.T) {
	addr := "127.0.0.1:" + itoa(redistest.FreePort(t)) // nobody listens
	rc := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { rc.Close() })
	var cfg atomic.Pointer[config.Config]
	c := testConfig()
	c.HTTP.Token = "s3cret"
	cfg.Store(c)
	lim := limits.New(limits.NewRedisStore(rc, "cpsguard", limits.RedisOptions{Timeout: 200 * time.Millisecond}), limits.Options{})
	base, logs := limitsServer(t, &cfg, lim)
	_, err := SetLimit(context.Background(), base, "s3cret", "peer", "dialer-1", LimitRequest{CPS: 5, TTL: "1m"})
	var e *Error
	if !errors.As(err, &e) || e.Code != http.StatusServiceUnavailable || !strings.Contains(e.Message, "nothing changed") {
		t.Errorf("PUT with Redis down: got %v, want 503 nothing changed", err)
	}
	if _, ok := lim.Lookup("peer", "dialer-1"); ok {
		t.Error("override applied although the store failed")
	}
	found := false
	for _, l := range logs.lines() {
		found = found || l["msg"] == "limit override set failed"
	}
	if !found {
		t.Errorf("no warning logged: %v", logs.lines())
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
