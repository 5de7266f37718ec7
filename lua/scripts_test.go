package lua_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cpsguard/cpsguard/internal/redistest"
	"github.com/cpsguard/cpsguard/lua"
)

func newClient(t *testing.T) (*redis.Client, *redistest.Server) {
	t.Helper()
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	return c, srv
}

func TestLoadAndRunEveryScript(t *testing.T) {
	ctx := context.Background()
	c, _ := newClient(t)
	if err := lua.Load(ctx, c); err != nil {
		t.Fatalf("Load: %v", err)
	}
	for _, name := range []string{lua.ScriptAdmit, lua.ScriptAdmitPace, lua.ScriptCounts, lua.ScriptPace, lua.ScriptRelease, lua.ScriptQueue, lua.ScriptPause, lua.ScriptEvidence, lua.ScriptRate, lua.ScriptRespace, lua.ScriptHeartbeat, lua.ScriptRefund, lua.ScriptOverrides, lua.ScriptCallsOccupy, lua.ScriptCallsFree, lua.ScriptCallsRefresh, lua.ScriptCallsCount, lua.ScriptDialogsEnded, lua.ScriptLive, lua.ScriptService, lua.ScriptRebook} {
		ok, err := c.ScriptExists(ctx, lua.SHA(name)).Result()
		if err != nil || len(ok) != 1 || !ok[0] {
			t.Errorf("script %s (sha %s) not loaded: %v %v", name, lua.SHA(name), ok, err)
		}
	}
	key := lua.Key("t", "peer", "a")
	r, err := lua.Admit(ctx, c, "m1", []lua.AdmitBucket{{Key: key, Limit: 1, WindowUS: 1_000_000}})
	if err != nil || !r.Admitted || r.Counts[0] != 1 {
		t.Fatalf("Admit = %+v, %v; want admitted with count 1", r, err)
	}
	// Scores are exact integer microseconds (no float formatting loss).
	score, err := c.ZScore(ctx, key, "m1").Result()
	if err != nil || int64(score) != r.NowUS || score != float64(r.NowUS) {
		t.Fatalf("score of m1 = %v (%v), want %d", score, err, r.NowUS)
	}
	ttl, err := c.PTTL(ctx, key).Result()
	if err != nil || ttl <= time.Second || ttl > 2*time.Second {
		t.Fatalf("PTTL = %v (%v), want window + 1 s, in (1s, 2s]", ttl, err)
	}
	cr, err := lua.Counts(ctx, c, []lua.AdmitBucket{{Key: key, Limit: 1, WindowUS: 1_000_000}})
	if err != nil || cr.Counts[0] != 1 || cr.NowUS < r.NowUS {
		t.Fatalf("Counts = %+v, %v; want 1", cr, err)
	}
	slots := lua.Key("t", "carrier", "a")
	p, err := lua.Pace(ctx, c, slots, "c1", 100_000, 0, 1_000_000, lua.PaceShare{})
	if err != nil || !p.OK || p.WaitUS != 0 {
		t.Fatalf("Pace = %+v, %v; want OK wait 0", p, err)
	}
	q, err := lua.Queue(ctx, c, slots, 100_000)
	if err != nil || q.WaitUS <= 0 || q.WaitUS > 100_000 || q.Sent != 1 || q.Queued != 0 {
		t.Fatalf("Queue = %+v, %v; want wait in (0, 100ms], 1 sent, none queued", q, err)
	}
	removed, err := lua.Release(ctx, c, slots, "c1")
	if err != nil || !removed {
		t.Fatalf("Release = %v, %v; want true", removed, err)
	}
	removed, err = lua.Release(ctx, c, slots, "c1")
	if err != nil || removed {
		t.Fatalf("second Release = %v, %v; want false", removed, err)
	}
	pz, err := lua.Pause(ctx, c, slots, lua.PauseOp{Op: "set", SpanUS: 2_000_000, Reason: "test", KeepUS: 0})
	if err != nil || !pz.Paused || !pz.Changed || pz.UntilUS != pz.NowUS+2_000_000 || pz.Reason != "test" {
		t.Fatalf("Pause set = %+v, %v; want paused 2 s", pz, err)
	}
	if ttl, err := c.PTTL(ctx, lua.PauseKey(slots)).Result(); err != nil || ttl <= 2*time.Second || ttl > 3*time.Second {
		t.Fatalf("pause PTTL = %v (%v), want span + 1 s", ttl, err)
	}
	if p, err := lua.Pace(ctx, c, slots, "c2", 100_000, 5_000_000, 1_000_000, lua.PaceShare{}); err != nil || p.OK || !p.Paused {
		t.Fatalf("Pace while paused = %+v, %v; want refused, paused", p, err)
	}
	if pz, err = lua.Pause(ctx, c, slots, lua.PauseOp{Op: "lift"}); err != nil || pz.Paused || !pz.Changed || pz.Reason != "test" {
		t.Fatalf("Pause lift = %+v, %v; want the lifted pause", pz, err)
	}
	ev, err := lua.Evidence(ctx, c, slots, "peer-a", true, 60_000_000, 2_000_000)
	if err != nil || ev.Callers != 1 || ev.Overloaded != 1 {
		t.Fatalf("Evidence = %+v, %v; want 1 caller, 1 overloaded", ev, err)
	}
	if ev, err = lua.Evidence(ctx, c, slots, "peer-b", false, 60_000_000, 2_000_000); err != nil || ev.Callers != 2 || ev.Overloaded != 1 {
		t.Fatalf("Evidence = %+v, %v; want 2 callers, 1 overloaded", ev, err)
	}
}

// After SCRIPT FLUSH (restart, failover) Run falls back to EVAL.
func TestRunAfterScriptFlush(t *testing.T) {
	ctx := context.Background()
	c, _ := newClient(t)
	if err := lua.Load(ctx, c); err != nil {
		t.Fatal(err)
	}
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := lua.Pace(ctx, c, "t:{carrier:x}", "m", 1000, 0, 1_000_000, lua.PaceShare{}); err != nil {
		t.Fatalf("Pace after SCRIPT FLUSH: %v", err)
	}
}

func TestArgsValidated(t *testing.T) {
	ctx := context.Background()
	var c redis.Scripter // never reached
	if _, err := lua.Admit(ctx, c, "m", nil); !errors.Is(err, lua.ErrArgs) {
		t.Errorf("Admit with no buckets: got %v, want ErrArgs", err)
	}
	if _, err := lua.Admit(ctx, c, "m", []lua.AdmitBucket{{Key: "k", Limit: 1}}); !errors.Is(err, lua.ErrArgs) {
		t.Errorf("Admit with zero window: got %v, want ErrArgs", err)
	}
	if _, err := lua.Pace(ctx, c, "k", "m", 0, 0, 1, lua.PaceShare{}); !errors.Is(err, lua.ErrArgs) {
		t.Errorf("Pace with zero interval: got %v, want ErrArgs", err)
	}
	if _, err := lua.Pace(ctx, c, "k", "m", 1, 0, 0, lua.PaceShare{}); !errors.Is(err, lua.ErrArgs) {
		t.Errorf("Pace with zero claim: got %v, want ErrArgs", err)
	}
	for _, sh := range []lua.PaceShare{{Name: "s"}, {Name: "s", Weight: 1001, LeadUS: 1, KeepUS: 1, SumCap: 1}, {Name: "s", Weight: 1, KeepUS: 1, SumCap: 1}} {
		if _, err := lua.Pace(ctx, c, "k", "m", 1, 0, 1, sh); !errors.Is(err, lua.ErrArgs) {
			t.Errorf("Pace with share %+v: got %v, want ErrArgs", sh, err)
		}
	}
	for _, op := range []lua.PauseOp{{Op: "set"}, {Op: "set", SpanUS: 1, KeepUS: -1}, {Op: "done"}, {Op: "open", MinAgeUS: -1}, {Op: "drop"}} {
		if _, err := lua.Pause(ctx, c, "k", op); !errors.Is(err, lua.ErrArgs) {
			t.Errorf("Pause %+v: got %v, want ErrArgs", op, err)
		}
	}
	if _, err := lua.Evidence(ctx, c, "k", "", true, 1, 1); !errors.Is(err, lua.ErrArgs) {
		t.Errorf("Evidence without a peer: got %v, want ErrArgs", err)
	}
	if _, err := lua.Counts(ctx, c, nil); !errors.Is(err, lua.ErrArgs) {
		t.Errorf("Counts with no buckets: got %v, want ErrArgs", err)
	}
	for _, b := range []lua.AdmitBucket{
		{Key: "k", Limit: 0, WindowUS: 1, RateMicros: 1},
		{Key: "k", Limit: lua.MaxTokens + 1, WindowUS: 1, RateMicros: 1},
		{Key: "k", Limit: 1, WindowUS: 1, RateMicros: -1},
		{Key: "k", Limit: 1, WindowUS: 1, RateMicros: lua.MaxRateMicros + 1},
	} {
		if _, err := lua.Admit(ctx, c, "m", []lua.AdmitBucket{b}); !errors.Is(err, lua.ErrArgs) {
			t.Errorf("Admit with %+v: got %v, want ErrArgs", b, err)
		}
		if _, err := lua.Refund(ctx, c, "m", []lua.AdmitBucket{b}); !errors.Is(err, lua.ErrArgs) {
			t.Errorf("Refund with %+v: got %v, want ErrArgs", b, err)
		}
	}
}

func TestSlot(t *testing.T) {
	for _, tc := range []struct {
		key  string
		want int
	}{
		{"foo", 12182},
		{"123456789", 12739},
		{"{foo}bar", 12182},
		{"x{foo}y", 12182},
		{"{}foo", lua.HashSlot("{}foo")}, // empty tag: whole key
		{"cpsguard:{peer:a}", lua.HashSlot("peer:a")},
	} {
		if got := lua.HashSlot(tc.key); got != tc.want {
			t.Errorf("Slot(%q) = %d, want %d", tc.key, got, tc.want)
		}
	}
}

// The Go slot function agrees with the server's CLUSTER KEYSLOT.
func TestSlotMatchesServer(t *testing.T) {
	srv := redistest.Start(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer c.Close()
	for i := range 50 {
		key := lua.Key("cpsguard", "peer", "p"+strconv.Itoa(i*7919))
		want, err := c.ClusterKeySlot(context.Background(), key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := lua.HashSlot(key); int64(got) != want {
			t.Fatalf("Slot(%q) = %d, want %d", key, got, want)
		}
	}
}

// Load is what the fallback's probe runs within one store.redis.timeout:
// with the scripts cached it is one SCRIPT EXISTS, with the cache empty (a
// restarted Redis) one more round trip of SCRIPT LOADs, and it never changes
// the hash a script is run by.
func TestLoadSendsOnlyWhatIsMissing(t *testing.T) {
	ctx := context.Background()
	c, srv := newClient(t)
	want := lua.SHA(lua.ScriptAdmit)
	calls := func(cmd string) int { return srv.CommandCalls(t, cmd) }
	for round, wantLoads := range []int{21, 0} {
		if err := c.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if err := lua.Load(ctx, c); err != nil {
			t.Fatalf("Load %d: %v", round, err)
		}
		if got := calls("script|load"); got != wantLoads {
			t.Errorf("Load %d sent %d SCRIPT LOAD, want %d", round, got, wantLoads)
		}
		if got := calls("script|exists"); got != 1 {
			t.Errorf("Load %d sent %d SCRIPT EXISTS, want 1", round, got)
		}
	}
	if got := lua.SHA(lua.ScriptAdmit); got != want {
		t.Fatalf("admit's hash after Load: %q, want %q", got, want)
	}
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := lua.Load(ctx, c); err != nil {
		t.Fatal(err)
	}
	r, err := lua.Admit(ctx, c, "m1", []lua.AdmitBucket{{Key: lua.Key("t", "peer", "flushed"), Limit: 1, WindowUS: 1_000_000}})
	if err != nil || !r.Admitted {
		t.Fatalf("Admit after a flush and Load = %+v, %v", r, err)
	}
}

// A server whose SCRIPT EXISTS or SCRIPT LOAD replies are not what Redis
// answers (a proxy, a wrong server, a hostile one) fails Load with an
// error naming the script or the reply: the node stays on its fallback,
// and no script's hash is changed by a reply.
func TestLoadRefusesWrongReplies(t *testing.T) {
	want := lua.SHA(lua.ScriptAdmit)
	for _, c := range []struct {
		name   string
		exists func(args []string) string
		load   string
		err    string
	}{
		{"too few flags", func([]string) string { return "*1\r\n:1\r\n" }, "", "SCRIPT EXISTS answered 1 flags for 21 scripts"},
		{"not an array", func([]string) string { return "+OK\r\n" }, "", "script exists"},
		{"exists refused", func([]string) string { return "-NOPERM no scripts\r\n" }, "", "NOPERM"},
		{"load answers another hash", func(a []string) string {
			return "*" + fmt.Sprint(len(a)-2) + "\r\n" + strings.Repeat(":0\r\n", len(a)-2)
		},
			"$40\r\n0000000000000000000000000000000000000000\r\n", "SCRIPT LOAD of admit.lua answered \"0000000000000000000000000000000000000000\""},
		{"load refused", func(a []string) string {
			return "*" + fmt.Sprint(len(a)-2) + "\r\n" + strings.Repeat(":0\r\n", len(a)-2)
		},
			"-ERR Error compiling script\r\n", "lua: load admit.lua: ERR Error compiling script"},
	} {
		t.Run(c.name, func(t *testing.T) {
			addr := redistest.StartFake(t, func(args []string) string {
				if !strings.EqualFold(args[0], "SCRIPT") || len(args) < 2 {
					return ""
				}
				if strings.EqualFold(args[1], "EXISTS") {
					return c.exists(args)
				}
				return c.load
			})
			cl := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DisableIdentity: true})
			defer cl.Close()
			err := lua.Load(context.Background(), cl)
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Fatalf("Load: %v, want an error with %q", err, c.err)
			}
			if got := lua.SHA(lua.ScriptAdmit); got != want {
				t.Fatalf("admit's hash after Load: %q, want %q", got, want)
			}
		})
	}
}

// Rebook puts slots back at their due times (a member already there keeps
// its), and pace.lua gives the next slot after the last one put back.
func TestRebookPutsSlotsBack(t *testing.T) {
	ctx := context.Background()
	c, _ := newClient(t)
	key := lua.Key("t", "carrier", "rebook")
	r, err := lua.Pace(ctx, c, key, "kept", 100_000, 5_000_000, 1_000_000, lua.PaceShare{})
	if err != nil || !r.OK {
		t.Fatalf("pace: %+v, %v", r, err)
	}
	kept, _ := c.ZScore(ctx, key, "kept").Result()
	n, err := lua.Rebook(ctx, c, key, time.Second, []lua.Waiting{
		{Member: "kept", In: 3 * time.Second},
		{Member: "a", In: 300 * time.Millisecond},
		{Member: "b", In: 600 * time.Millisecond},
	})
	if err != nil || n != 2 {
		t.Fatalf("Rebook = %d, %v; want 2 added", n, err)
	}
	if got, _ := c.ZScore(ctx, key, "kept").Result(); got != kept {
		t.Fatalf("a member already there moved: %v, was %v", got, kept)
	}
	b, _ := c.ZScore(ctx, key, "b").Result()
	next, err := lua.Pace(ctx, c, key, "next", 100_000, 5_000_000, 1_000_000, lua.PaceShare{})
	if err != nil || !next.OK {
		t.Fatalf("pace after: %+v, %v", next, err)
	}
	if got, _ := c.ZScore(ctx, key, "next").Result(); got != b+100_000 {
		t.Fatalf("next slot at %v, want the last slot put back plus the interval, %v", got, b+100_000)
	}
	if ttl := c.PTTL(ctx, key).Val(); ttl < 1500*time.Millisecond {
		t.Fatalf("slot set expires in %v, want past its last slot plus keep", ttl)
	}
	if _, err := lua.Rebook(ctx, c, key, 0, []lua.Waiting{{Member: "x"}}); !errors.Is(err, lua.ErrArgs) {
		t.Fatalf("keep 0: %v, want ErrArgs", err)
	}
}
