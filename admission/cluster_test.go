package admission

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cpsguard/cpsguard/internal/redistest"
	"github.com/cpsguard/cpsguard/lua"
)

// startOneNodeCluster starts a redis-server in cluster mode owning all 16384
// slots: the cheapest real cluster. It rejects scripts whose keys span slots
// (CROSSSLOT) exactly like a 3-master one.
func startOneNodeCluster(t *testing.T) *redis.ClusterClient {
	t.Helper()
	srv := redistest.Start(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
	ctx := context.Background()
	if out, err := srv.CLI(ctx, "CLUSTER", "ADDSLOTSRANGE", "0", "16383"); err != nil || !strings.Contains(out, "OK") {
		t.Fatalf("CLUSTER ADDSLOTSRANGE: %v %s", err, out)
	}
	for i := 0; ; i++ {
		out, _ := srv.CLI(ctx, "CLUSTER", "INFO")
		if strings.Contains(out, "cluster_state:ok") {
			break
		}
		if i > 100 {
			t.Fatalf("cluster not ok after 5 s: %s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{srv.Addr()}, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestCrossSlot(t *testing.T) {
	c := startOneNodeCluster(t)
	ctx := context.Background()
	s := NewRedisStore(c, RedisOptions{Timeout: 5 * time.Second})
	if err := s.Load(ctx); err != nil {
		t.Fatal(err)
	}
	peer := Bucket{Key: lua.Key("test", "peer", "p1"), Limit: 10, Window: time.Second}
	cust := Bucket{Key: lua.Key("test", "customer", "c1"), Limit: 5, Window: time.Second}
	if lua.HashSlot(peer.Key) == lua.HashSlot(cust.Key) {
		t.Fatal("test keys share a slot; pick other names")
	}
	// One script call over both keys is what the cross-slot path avoids.
	_, err := lua.Admit(ctx, c, "probe", []lua.AdmitBucket{{Key: peer.Key, Limit: 1, WindowUS: 1}, {Key: cust.Key, Limit: 1, WindowUS: 1}})
	if err == nil || !strings.Contains(err.Error(), "CROSSSLOT") {
		t.Fatalf("one call across slots: got %v, want CROSSSLOT", err)
	}

	admitted := 0
	for i := range 10 {
		d := admit(t, s, fmt.Sprintf("call-%d", i), peer, cust)
		if d.Admit {
			admitted++
			continue
		}
		if d.Refused != 1 || !slices.Equal(d.Counts, []int{5, 5}) || d.RetryAfter <= 0 {
			t.Fatalf("call %d: got %+v, want refused by bucket 1 with counts [5 5]", i, d)
		}
	}
	if admitted != 5 {
		t.Fatalf("got %d admitted, want 5", admitted)
	}
	counts, err := s.Counts(ctx, []Bucket{peer, cust})
	if err != nil || !slices.Equal(counts, []int{5, 5}) {
		t.Fatalf("Counts = %v, %v; want [5 5] (refused calls rolled back)", counts, err)
	}
	// A retransmission of an admitted call is a duplicate on both slots.
	if d := admit(t, s, "call-0", peer, cust); !d.Admit || !d.Duplicate {
		t.Fatalf("retransmission: got %+v, want admitted duplicate", d)
	}
	// Refused by the first bucket: the second is never examined.
	full := Bucket{Key: lua.Key("test", "peer", "p2"), Limit: 0, Window: time.Second}
	if d := admit(t, s, "call-x", full, peer); d.Admit || d.Refused != 0 || d.Counts[1] != -1 {
		t.Fatalf("refused by first: got %+v, want refused by 0 with second count -1", d)
	}
	if counts, _ := s.Counts(ctx, []Bucket{peer}); counts[0] != 5 {
		t.Fatalf("peer count = %d, want 5", counts[0])
	}
}

// Cross-slot with token buckets and extra windows: each scope's buckets are
// decided in one call on their slot; when the customer's slot refuses, the
// peer's slot is undone, its token given back and its window entries
// removed, so a refused call costs nothing anywhere.
func TestCrossSlotTokenBucket(t *testing.T) {
	c := startOneNodeCluster(t)
	ctx := context.Background()
	s := NewRedisStore(c, RedisOptions{Timeout: 5 * time.Second})
	if err := s.Load(ctx); err != nil {
		t.Fatal(err)
	}
	pk, ck := lua.Key("test", "peer", "p1"), lua.Key("test", "customer", "c1")
	if lua.HashSlot(pk) == lua.HashSlot(ck) {
		t.Fatal("test keys share a slot; pick other names")
	}
	peerTB := TokenBucket(pk, 1, 10)
	peerW := WindowBucket(pk, 100, time.Minute)
	custTB := TokenBucket(ck, 1, 2)
	custW := WindowBucket(ck, 3, time.Minute)
	all := []Bucket{peerTB, peerW, custTB, custW}
	if g := slotGroups(all); len(g) != 2 || !slices.Equal(g[0], []int{0, 1}) || !slices.Equal(g[1], []int{2, 3}) {
		t.Fatalf("slotGroups = %v, want [[0 1] [2 3]]", g)
	}
	for i := range 2 {
		if d := admit(t, s, fmt.Sprintf("call-%d", i), all...); !d.Admit || !slices.Equal(d.Counts, []int{i + 1, i + 1, i + 1, i + 1}) {
			t.Fatalf("call %d: got %+v, want admitted with %d everywhere", i, d, i+1)
		}
	}
	d := admit(t, s, "call-2", all...)
	if d.Admit || d.Refused != 2 || !slices.Equal(d.Counts, []int{2, 2, 2, 2}) || d.RetryAfter <= 0 {
		t.Fatalf("3rd call: got %+v, want refused by the customer's token bucket (2) with counts [2 2 2 2]", d)
	}
	if got := counts(t, s, all...); !slices.Equal(got, []int{2, 2, 2, 2}) {
		t.Fatalf("Counts = %v, want [2 2 2 2] (the peer's token given back, its window entry removed)", got)
	}
	if n, _ := c.ZCard(ctx, peerTB.Key).Result(); n != 2 {
		t.Fatalf("peer token bucket remembers %d calls, want 2", n)
	}
	// A retransmission of an admitted call is a duplicate on both slots and
	// takes nothing.
	if d := admit(t, s, "call-0", all...); !d.Admit || !d.Duplicate {
		t.Fatalf("retransmission: got %+v, want admitted duplicate", d)
	}
	if got := counts(t, s, all...); !slices.Equal(got, []int{2, 2, 2, 2}) {
		t.Fatalf("Counts after the retransmission = %v, want [2 2 2 2]", got)
	}
}
