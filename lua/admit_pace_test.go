package lua_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/cpsguard/cpsguard/lua"
)

// admit_pace admits and reserves in one step: an admitted call holds a
// slot (pace.lua's rules: spaced by the interval), a refused or duplicate
// call holds none, and the admission is admit.lua's own (same counts).
func TestAdmitPace(t *testing.T) {
	ctx := context.Background()
	c, _ := newClient(t)
	peer := lua.AdmitBucket{Key: lua.Key("ap", "peer", "a"), Limit: 3, WindowUS: 60_000_000}
	cust := lua.AdmitBucket{Key: lua.Key("ap", "customer", "a"), Limit: 10, WindowUS: 60_000_000}
	slots := lua.Key("ap", "carrier", "a")
	pc := func(m string) lua.PaceCall {
		return lua.PaceCall{Key: slots, Member: m, IntervalUS: 100_000, MaxWaitUS: 5_000_000, ClaimUS: 6_000_000}
	}
	var last float64
	for i := range 3 {
		m := fmt.Sprint("m", i)
		a, s, paced, err := lua.AdmitPace(ctx, c, m, []lua.AdmitBucket{peer, cust}, pc(m))
		if err != nil || !a.Admitted || a.Duplicate || !paced || !s.OK || s.Paused || s.Booked {
			t.Fatalf("call %d: %+v %+v paced %v, %v; want admitted and a slot", i, a, s, paced, err)
		}
		if a.Counts[0] != int64(i+1) || a.Counts[1] != int64(i+1) {
			t.Fatalf("call %d: counts %v, want %d in both", i, a.Counts, i+1)
		}
		score, err := c.ZScore(ctx, slots, m).Result()
		if err != nil {
			t.Fatalf("call %d: no slot in %s: %v", i, slots, err)
		}
		if i > 0 && score-last < 100_000 {
			t.Fatalf("call %d: slot %v only %v µs after the last", i, score, score-last)
		}
		if int64(score)-s.NowUS != s.WaitUS {
			t.Fatalf("call %d: slot at %v, now %d, wait %d: not the slot reserved", i, score, s.NowUS, s.WaitUS)
		}
		last = score
	}
	// Over the peer's limit: refused, no slot.
	a, _, paced, err := lua.AdmitPace(ctx, c, "m3", []lua.AdmitBucket{peer, cust}, pc("m3"))
	if err != nil || a.Admitted || a.Refused != 0 || paced {
		t.Fatalf("4th call: %+v paced %v, %v; want refused by bucket 0, not paced", a, paced, err)
	}
	if _, err := c.ZScore(ctx, slots, "m3").Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("refused call holds a slot: %v", err)
	}
	// A duplicate (a retransmission admitted before): admitted, nothing
	// added, not paced (its first copy holds its slot).
	a, _, paced, err = lua.AdmitPace(ctx, c, "m0", []lua.AdmitBucket{peer, cust}, pc("m0-again"))
	if err != nil || !a.Admitted || !a.Duplicate || paced {
		t.Fatalf("duplicate: %+v paced %v, %v; want a duplicate, not paced", a, paced, err)
	}
	if n, _ := c.ZCard(ctx, slots).Result(); n != 3 {
		t.Fatalf("%d slots after the duplicate, want 3", n)
	}
	// A paused carrier: admitted, and pace.lua refuses the slot as paused.
	if _, err := lua.Pause(ctx, c, slots, lua.PauseOp{Op: "set", SpanUS: 2_000_000, Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	a, s, paced, err := lua.AdmitPace(ctx, c, "m4", []lua.AdmitBucket{cust}, pc("m4"))
	if err != nil || !a.Admitted || !paced || s.OK || !s.Paused {
		t.Fatalf("paused carrier: %+v %+v paced %v, %v; want admitted, slot refused as paused", a, s, paced, err)
	}
}

// An error of either script is the reply's error, and arguments pace.lua
// cannot take are refused before anything is sent (nothing admitted).
func TestAdmitPaceErrors(t *testing.T) {
	ctx := context.Background()
	c, _ := newClient(t)
	b := lua.AdmitBucket{Key: lua.Key("ape", "peer", "a"), Limit: 3, WindowUS: 1_000_000}
	slots := lua.Key("ape", "carrier", "a")
	if _, _, _, err := lua.AdmitPace(ctx, c, "m", []lua.AdmitBucket{b}, lua.PaceCall{Key: slots, Member: "m"}); !errors.Is(err, lua.ErrArgs) {
		t.Fatalf("zero interval: %v, want ErrArgs", err)
	}
	if n, _ := c.Exists(ctx, b.Key).Result(); n != 0 {
		t.Fatalf("bad pace arguments admitted the call")
	}
	// The slot set is a string: pace.lua fails inside the script.
	if err := c.Set(ctx, slots, "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	_, _, _, err := lua.AdmitPace(ctx, c, "m", []lua.AdmitBucket{b},
		lua.PaceCall{Key: slots, Member: "m", IntervalUS: 1000, MaxWaitUS: 0, ClaimUS: 1000})
	if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("wrong type slot set: %v, want a WRONGTYPE error", err)
	}
}
