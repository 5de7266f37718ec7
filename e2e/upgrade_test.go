//go:build linux

package e2e

// A rolling upgrade to opaque dialog tokens: while a node of an older
// release beats in the pool's Redis, a node writes its tokens in
// base64url (what that node reads); once it stops beating, opaque text.
// SIPp's calls complete either way, their BYEs relayed under the token.

import (
	"context"
	"encoding/base64"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cpsguard/cpsguard/internal/redistest"
)

const (
	msgOlderLive = "nodes of an older release are live"
	msgAllOpaque = "every live node reads dialog tokens in opaque text"
)

// tokenIn returns the dialog token of a Record-Route value ("" if none).
func tokenIn(rr string) string {
	_, rest, ok := strings.Cut(rr, ";cg=")
	if !ok {
		return ""
	}
	if i := strings.IndexAny(rest, ";>,"); i >= 0 {
		rest = rest[:i]
	}
	return rest
}

// isOpaqueText reports whether s holds only the characters of
// sip/internal/opaque's alphabet.
func isOpaqueText(s string) bool {
	for _, c := range []byte(s) {
		if !strings.ContainsRune("0123456789bcdfghjklmnpqrstvwxyz_", rune(c)) {
			return false
		}
	}
	return s != ""
}

func TestRollingUpgradeTokenText(t *testing.T) {
	srv := redistest.Start(t)
	car := startCarrier(t, "127.0.0.1")
	n := startNode(t, nodeConf{id: "new-1", redis: srv.Addr(),
		peers:    []peerConf{{name: "dialer", sources: []string{"127.0.0.2/32"}, cps: 100}},
		carriers: []carrierConf{{name: "carrier", addr: car.addr, cps: 1000}}}, true)

	// The older node: what heartbeat.lua of the release before does, a
	// ZADD of its id into the node set and of its process into the
	// process set, on Redis's clock, every 300 ms.
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rc.Close()
	ctx, stopOld := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(300 * time.Millisecond)
		defer tick.Stop()
		for {
			if now, err := rc.Time(ctx).Result(); err == nil {
				rc.ZAdd(ctx, "e2e:{nodes:all}", redis.Z{Score: float64(now.UnixMilli()), Member: "old-1"})
				rc.ZAdd(ctx, "e2e:{nodes:all}:instances", redis.Z{Score: float64(now.UnixMilli()), Member: "old-1 0123456789abcdef"})
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	defer func() { stopOld(); wg.Wait() }()

	waitLog := func(msg string, limit time.Duration) {
		t.Helper()
		deadline := time.Now().Add(limit)
		for n.grep(msg) == "" {
			if time.Now().After(deadline) {
				keys, _ := rc.Keys(context.Background(), "e2e:{nodes*").Result()
				t.Fatalf("no %q in the node's log after %s (Redis keys %v):\n%s", msg, limit, keys, n.grep("node"))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// calls runs SIPp's plain caller (uac.xml: INVITE, 200, ACK, BYE) and
	// returns the tokens the carrier saw, one per call.
	calls := func(name string) []string {
		t.Helper()
		before := map[string]bool{}
		for _, m := range car.requests("INVITE") {
			before[m.get("call-id")] = true
		}
		byes := car.count("BYE")
		const count = 20
		if r := dial(t, "127.0.0.2", n.sip, 10, count, 30*time.Second); r.code != 0 || r.n("SuccessfulCall") != count {
			t.Fatalf("%s: SIPp: every call must complete:\n%s", name, r.failure())
		}
		var toks []string
		for _, m := range car.requests("INVITE") {
			if !before[m.get("call-id")] {
				toks = append(toks, tokenIn(m.get("record-route")))
			}
		}
		if len(toks) != count || car.count("BYE")-byes != count {
			t.Fatalf("%s: the carrier got %d INVITEs and %d BYEs, want %d each", name, len(toks), car.count("BYE")-byes, count)
		}
		return toks
	}

	waitLog(msgOlderLive, 5*time.Second)
	for _, tok := range calls("older node live") {
		raw, err := base64.RawURLEncoding.DecodeString(tok)
		if err != nil || len(tok) != 64 || raw[0] != 3 {
			t.Fatalf("token %q with an older node live: want version 3 in base64url (64 characters)", tok)
		}
	}

	stopOld() // the older node is gone: its beat expires within 3 s
	waitLog(msgAllOpaque, 8*time.Second)
	for _, tok := range calls("every node new") {
		if len(tok) != 77 || !isOpaqueText(tok) {
			t.Fatalf("token %q once every node reads opaque text: want 77 characters of it", tok)
		}
	}
}
