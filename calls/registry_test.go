package calls

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cpsguard/cpsguard/internal/redistest"
	"github.com/cpsguard/cpsguard/lua"
)

// registryBackend is one Registry under the contract suite; open returns a
// new client's view of the same shared state (another node).
type registryBackend struct {
	name    string
	open    func(t *testing.T) Registry
	advance func(d time.Duration)
}

func registryBackends(t *testing.T) []registryBackend {
	t.Helper()
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	local := NewLocalRegistry(clock.Now)
	redisBackend := func(name string, newClient func() redis.UniversalClient) registryBackend {
		admin := newClient()
		t.Cleanup(func() { _ = admin.Close() })
		if err := lua.Load(context.Background(), admin); err != nil {
			t.Fatalf("load scripts: %v", err)
		}
		return registryBackend{
			name: name,
			open: func(t *testing.T) Registry {
				c := newClient()
				t.Cleanup(func() { _ = c.Close() })
				// A prefix per test: the suite shares one server.
				return NewRedisRegistry(c, "t-"+t.Name(), RegistryOptions{Timeout: 5 * time.Second})
			},
			advance: time.Sleep,
		}
	}
	srv := redistest.Start(t)
	cl3 := redistest.StartCluster(t, 3, 0)
	return []registryBackend{
		{name: "local", open: func(*testing.T) Registry { return local }, advance: clock.Advance},
		redisBackend("redis", func() redis.UniversalClient {
			return redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
		}),
		redisBackend("cluster-3", func() redis.UniversalClient {
			return redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl3.Addrs(), ContextTimeoutEnabled: true})
		}),
	}
}

func liveCall(id, node string) Live {
	return Live{ID: id, CallID: "cid-" + id + "@host", Peer: "dialer-1", Customer: "acme", Carrier: "a", Node: node,
		StartedAt: time.Date(2026, 1, 1, 0, 0, 0, 123e6, time.UTC)}
}

func TestRegistryContract(t *testing.T) {
	ctx := context.Background()
	for _, b := range registryBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			t.Run("put list remove", func(t *testing.T) {
				r, other := b.open(t), b.open(t)
				a, c := liveCall("a", "n1"), liveCall("c", "n2")
				if err := r.Put(ctx, time.Minute, []Live{a}); err != nil {
					t.Fatal(err)
				}
				if err := other.Put(ctx, time.Minute, []Live{c}); err != nil {
					t.Fatal(err)
				}
				got, err := r.List(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if want := []Live{a, c}; !reflect.DeepEqual(got, want) {
					t.Fatalf("list: got %+v, want %+v", got, want)
				}
				// Put again: the entry is replaced (answered now).
				ans := time.Date(2026, 1, 1, 0, 0, 2, 0, time.UTC)
				a.AnsweredAt = &ans
				if err := r.Put(ctx, 2*time.Minute, []Live{a}); err != nil {
					t.Fatal(err)
				}
				if err := other.Remove(ctx, []string{"c", "unknown"}); err != nil {
					t.Fatal(err)
				}
				got, _ = other.List(ctx)
				if len(got) != 1 || got[0].AnsweredAt == nil || !got[0].AnsweredAt.Equal(ans) {
					t.Fatalf("after an update and a remove: got %+v, want a answered", got)
				}
				if err := r.Remove(ctx, []string{"a"}); err != nil {
					t.Fatal(err)
				}
				if got, _ := r.List(ctx); len(got) != 0 {
					t.Fatalf("after removing all: %+v", got)
				}
			})
			t.Run("expiry", func(t *testing.T) {
				r := b.open(t)
				if err := r.Put(ctx, 100*time.Millisecond, []Live{liveCall("short", "n1")}); err != nil {
					t.Fatal(err)
				}
				if err := r.Put(ctx, time.Hour, []Live{liveCall("long", "n1")}); err != nil {
					t.Fatal(err)
				}
				b.advance(300 * time.Millisecond)
				got, err := r.List(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if len(got) != 1 || got[0].ID != "long" {
					t.Fatalf("after the short ttl: got %+v, want only long", got)
				}
				_ = r.Remove(ctx, []string{"long"})
			})
			t.Run("many", func(t *testing.T) {
				r := b.open(t)
				var ls []Live
				for i := 0; i < 1234; i++ {
					ls = append(ls, liveCall("m"+strconv.Itoa(i), "n1"))
				}
				if err := r.Put(ctx, time.Minute, ls); err != nil {
					t.Fatal(err)
				}
				got, err := r.List(ctx)
				if err != nil || len(got) != len(ls) {
					t.Fatalf("list of %d: got %d, %v", len(ls), len(got), err)
				}
				ids := make([]string, len(ls))
				for i, l := range ls {
					ids[i] = l.ID
				}
				if err := r.Remove(ctx, ids); err != nil {
					t.Fatal(err)
				}
				if got, _ := r.List(ctx); len(got) != 0 {
					t.Fatalf("after removing %d: %d left", len(ids), len(got))
				}
			})
			t.Run("end requests", func(t *testing.T) {
				r, other := b.open(t), b.open(t)
				for _, req := range [][2]string{{"n1", "x"}, {"n2", "y"}, {"n1", "z"}} {
					if err := r.RequestEnd(ctx, req[0], req[1]); err != nil {
						t.Fatal(err)
					}
				}
				got, err := other.TakeEnds(ctx, "n1")
				if err != nil || !reflect.DeepEqual(got, []string{"x", "z"}) {
					t.Fatalf("n1's ends: got %v, %v; want [x z]", got, err)
				}
				if got, err := other.TakeEnds(ctx, "n1"); err != nil || len(got) != 0 {
					t.Fatalf("n1's ends taken twice: %v, %v", got, err)
				}
				if got, _ := r.TakeEnds(ctx, "n2"); !reflect.DeepEqual(got, []string{"y"}) {
					t.Fatalf("n2's ends: got %v", got)
				}
				for i := 0; i < maxTake+5; i++ {
					_ = r.RequestEnd(ctx, "n3", fmt.Sprint(i))
				}
				first, _ := r.TakeEnds(ctx, "n3")
				rest, _ := r.TakeEnds(ctx, "n3")
				if len(first) != maxTake || len(rest) != 5 {
					t.Fatalf("%d requests taken as %d then %d, want %d then 5", maxTake+5, len(first), len(rest), maxTake)
				}
			})
			t.Run("bad args", func(t *testing.T) {
				r := b.open(t)
				if err := r.Put(ctx, 0, []Live{liveCall("a", "n")}); err == nil {
					t.Error("Put with ttl 0: no error")
				}
				if err := r.RequestEnd(ctx, "", "x"); err == nil {
					t.Error("RequestEnd without a node: no error")
				}
			})
		})
	}
}
