package lua_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cpsguard/cpsguard/lua"
)

// hashLevel reads a token bucket's stored level and time.
func hashLevel(t *testing.T, c *redis.Client, key string) (tokens, last int64) {
	t.Helper()
	h, err := c.HGetAll(context.Background(), lua.TokenKey(key)).Result()
	if err != nil {
		t.Fatal(err)
	}
	tokens, err1 := strconv.ParseInt(h["tokens"], 10, 64)
	last, err2 := strconv.ParseInt(h["last"], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("hash %v: fields are not integers", h)
	}
	return tokens, last
}

// A token bucket on real Redis: full when absent, integer micro-tokens in
// the hash, refilled on Redis TIME, a TTL that ends when it is full again,
// a lowered capacity clamps the level without resetting it, and a refund
// gives the token back.
func TestTokenBucketScript(t *testing.T) {
	ctx := context.Background()
	c, _ := newClient(t)
	key := lua.Key("t", "peer", "tb") + ":tb"
	// 3 tokens, 2.5 per second: the remainder of the rate is exercised.
	b := lua.AdmitBucket{Key: key, Limit: 3, WindowUS: 1_010_000, RateMicros: 2_500_000}
	var first lua.AdmitReply
	var wrote time.Time // before the last call that wrote the hash (and its TTL)
	for i := range 3 {
		wrote = time.Now()
		r, err := lua.Admit(ctx, c, "m"+strconv.Itoa(i), []lua.AdmitBucket{b})
		if err != nil || !r.Admitted || r.Counts[0] != int64(i+1) {
			t.Fatalf("call %d: got %+v, %v; want admitted with %d tokens in use", i, r, err, i+1)
		}
		if i == 0 {
			first = r
		}
	}
	tokens, last := hashLevel(t, c, key)
	if tokens >= 1_000_000 || last < first.NowUS {
		t.Fatalf("after 3 calls: tokens %d last %d, want < 1 token, last >= %d", tokens, last, first.NowUS)
	}
	r, err := lua.Admit(ctx, c, "m3", []lua.AdmitBucket{b})
	if err != nil || r.Admitted || r.Refused != 0 || r.Counts[0] != 3 {
		t.Fatalf("4th call: got %+v, %v; want refused with 3 in use", r, err)
	}
	// The refill since last, in integers, decides the retry-after.
	level := tokens + (r.NowUS-last)*25/10
	if want := (1_000_000 - level + 2) * 10 / 25; r.RetryAfterUS < want-1 || r.RetryAfterUS > want+1 {
		t.Fatalf("retry after %dµs, want about %dµs", r.RetryAfterUS, want)
	}
	// A refused call writes nothing.
	if t2, l2 := hashLevel(t, c, key); t2 != tokens || l2 != last {
		t.Fatalf("refused call changed the hash: %d/%d, want %d/%d", t2, l2, tokens, last)
	}
	// The TTL was set at the third call and runs down since by at most
	// the time since before it (whole ms: 1 ms more); a fixed 100 ms
	// margin failed on a stall over the three round trips in between.
	ttl, err := c.PTTL(ctx, lua.TokenKey(key)).Result()
	fill := time.Duration((3_000_000-tokens)*1000/2_500_000) * time.Millisecond
	if lo := fill + time.Second - time.Since(wrote) - time.Millisecond; err != nil || ttl < lo || ttl > fill+time.Second+time.Millisecond {
		t.Fatalf("PTTL = %v, %v; want time to full (%v) + 1 s, run down since the write: in [%v, %v]", ttl, err, fill, lo, fill+time.Second+time.Millisecond)
	}

	time.Sleep(time.Duration(r.RetryAfterUS) * time.Microsecond)
	r, err = lua.Admit(ctx, c, "m4", []lua.AdmitBucket{b})
	if err != nil || !r.Admitted {
		t.Fatalf("after retry-after: got %+v, %v; want admitted", r, err)
	}

	// Refund gives the token back (the member leaves the remembered set).
	before, _ := hashLevel(t, c, key)
	n, err := lua.Refund(ctx, c, "m4", []lua.AdmitBucket{b})
	after, _ := hashLevel(t, c, key)
	if err != nil || n != 1 || after != before+1_000_000 {
		t.Fatalf("Refund = %d, %v; tokens %d -> %d, want 1 and one token more", n, err, before, after)
	}
	if n, err := lua.Refund(ctx, c, "m4", []lua.AdmitBucket{b}); err != nil || n != 0 {
		t.Fatalf("second Refund = %d, %v; want 0 (nothing to give back)", n, err)
	}

	// Capacity raised at reload: the level is kept, not reset to full.
	big := b
	big.Limit = 100
	cr, err := lua.Counts(ctx, c, []lua.AdmitBucket{big})
	if err != nil || cr.Counts[0] < 97 || cr.Counts[0] > 99 {
		t.Fatalf("Counts with capacity 100 = %+v, %v; want 97-99 in use (level kept)", cr, err)
	}
	// Capacity lowered: the level is clamped to it.
	if err := c.HSet(ctx, lua.TokenKey(key), "tokens", 3_000_000).Err(); err != nil {
		t.Fatal(err)
	}
	small := b
	small.Limit = 1
	for i, want := range []bool{true, false} {
		r, err := lua.Admit(ctx, c, "s"+strconv.Itoa(i), []lua.AdmitBucket{small})
		if err != nil || r.Admitted != want {
			t.Fatalf("capacity 1, call %d: got %+v, %v; want admitted %v", i, r, err, want)
		}
	}
}

// A token bucket and a rolling window decided together: when the window
// refuses, no token is taken; a retransmission is a duplicate.
func TestTokenBucketWithWindow(t *testing.T) {
	ctx := context.Background()
	c, _ := newClient(t)
	k := lua.Key("t", "customer", "c")
	tb := lua.AdmitBucket{Key: k + ":tb", Limit: 5, WindowUS: 1_010_000, RateMicros: 1_000_000}
	w := lua.AdmitBucket{Key: k + ":w60s", Limit: 1, WindowUS: 60_010_000}
	if r, err := lua.Admit(ctx, c, "a", []lua.AdmitBucket{tb, w}); err != nil || !r.Admitted || r.Counts[0] != 1 || r.Counts[1] != 1 {
		t.Fatalf("first: %+v, %v; want admitted [1 1]", r, err)
	}
	tokens, _ := hashLevel(t, c, tb.Key)
	if r, err := lua.Admit(ctx, c, "a", []lua.AdmitBucket{tb, w}); err != nil || !r.Duplicate {
		t.Fatalf("retransmission: %+v, %v; want duplicate", r, err)
	}
	if r, err := lua.Admit(ctx, c, "b", []lua.AdmitBucket{tb, w}); err != nil || r.Admitted || r.Refused != 1 {
		t.Fatalf("second: %+v, %v; want refused by the window", r, err)
	}
	if t2, _ := hashLevel(t, c, tb.Key); t2 != tokens {
		t.Fatalf("tokens %d after refusals, want %d (none taken)", t2, tokens)
	}
	// The token bucket alone still recognises the retransmission.
	if r, err := lua.Admit(ctx, c, "a", []lua.AdmitBucket{tb}); err != nil || !r.Duplicate {
		t.Fatalf("retransmission, token bucket alone: %+v, %v; want duplicate", r, err)
	}
}
