package store

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cpsguard/cpsguard/admission"
	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/redistest"
	"github.com/cpsguard/cpsguard/lua"
)

// TestClusterCrossSlotNeverOverAdmits runs admissions whose peer and customer
// buckets live on different masters of a real 3-master cluster.
func TestClusterCrossSlotNeverOverAdmits(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	cl := redistest.StartCluster(t, 3, 0)
	cfg := &config.Config{NodeID: "n1", Store: config.Store{KeyPrefix: "xs", OnError: PolicyReject,
		Redis: &config.Redis{Addrs: cl.Addrs(), Timeout: time.Second}}}
	s, _ := open(t, cfg)
	if got := s.Mode(); got != ModeRedis {
		t.Fatalf("mode: got %s, want redis", got)
	}
	peers := []admission.Bucket{
		{Key: lua.Key("xs", "peer", "p1"), Limit: 10, Window: 30 * time.Second},
		{Key: lua.Key("xs", "peer", "p2"), Limit: 10, Window: 30 * time.Second},
	}
	cust := admission.Bucket{Key: lua.Key("xs", "customer", "acme"), Limit: 8, Window: 30 * time.Second}
	if lua.HashSlot(peers[0].Key) == lua.HashSlot(cust.Key) && lua.HashSlot(peers[1].Key) == lua.HashSlot(cust.Key) {
		t.Fatal("test keys share a slot; pick other names")
	}
	var admitted, perPeer [2]atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < 60; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			p := i % 2
			d, err := s.Admit(context.Background(), fmt.Sprintf("call-%d", i), []admission.Bucket{peers[p], cust})
			if err != nil {
				t.Errorf("call %d: %v", i, err)
				return
			}
			if d.Admit {
				admitted[0].Add(1)
				perPeer[p].Add(1)
			}
		}(i)
	}
	wg.Wait()
	ctx := context.Background()
	if got := admitted[0].Load(); got != 8 {
		t.Fatalf("admitted %d calls, want exactly the customer limit 8", got)
	}
	inPeers := s.client.ZCard(ctx, peers[0].Key).Val() + s.client.ZCard(ctx, peers[1].Key).Val()
	if inPeers != 8 {
		t.Fatalf("peer buckets hold %d entries, want 8 (refused calls must leave no reservation)", inPeers)
	}
	if got := s.client.ZCard(ctx, cust.Key).Val(); got != 8 {
		t.Fatalf("customer bucket holds %d, want 8", got)
	}
}

// admitLoop admits calls for d and fails the test on any error; it returns
// how many were decided.
func admitLoop(t *testing.T, s *Stores, d time.Duration, stop func() bool) int {
	t.Helper()
	b := []admission.Bucket{{Key: lua.Key("ha", "peer", "p"), Limit: 1000, Window: time.Second}}
	deadline := time.Now().Add(d)
	n := 0
	for time.Now().Before(deadline) && !stop() {
		if _, err := s.Admit(context.Background(), fmt.Sprint("c", n), b); err != nil {
			t.Fatalf("call %d got a store error, want a decision: %v", n, err)
		}
		n++
		time.Sleep(5 * time.Millisecond)
	}
	return n
}

func TestSentinelFailoverDuringLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Sentinel group")
	}
	st := redistest.StartSentinel(t, "cpsg", 1)
	cfg := &config.Config{NodeID: "n1", Store: config.Store{KeyPrefix: "ha", OnError: PolicyLocal,
		Redis: &config.Redis{Addrs: st.SentinelAddrs(), MasterName: "cpsg", Timeout: 100 * time.Millisecond}}}
	s, m := open(t, cfg)
	if got := s.Mode(); got != ModeRedis {
		t.Fatalf("mode: got %s, want redis", got)
	}
	admitLoop(t, s, 300*time.Millisecond, func() bool { return false })
	st.Master.Kill()
	// Calls keep being decided through the failover; the node returns to
	// Redis once the sentinels have promoted the replica.
	sawFallback := false
	admitLoop(t, s, 30*time.Second, func() bool {
		if s.Mode() == ModeFallback {
			sawFallback = true
		}
		return sawFallback && s.Mode() == ModeRedis
	})
	if !sawFallback || s.Mode() != ModeRedis {
		t.Fatalf("mode switches: %v, now %s; want fallback then redis", m.list(), s.Mode())
	}
	admitLoop(t, s, 200*time.Millisecond, func() bool { return false })
	if n := s.client.ZCard(context.Background(), lua.Key("ha", "peer", "p")).Val(); n == 0 {
		t.Fatal("the promoted master holds no admissions after the switch back")
	}
}

func TestClusterMasterKilledReplicaTakesOver(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster with replicas")
	}
	cl := redistest.StartCluster(t, 3, 1)
	cfg := &config.Config{NodeID: "n1", Store: config.Store{KeyPrefix: "ha", OnError: PolicyLocal,
		Redis: &config.Redis{Addrs: cl.Addrs(), Timeout: 100 * time.Millisecond}}}
	s, m := open(t, cfg)
	admitLoop(t, s, 300*time.Millisecond, func() bool { return false })
	// Kill the master serving the bucket's slot.
	ctx := context.Background()
	key := lua.Key("ha", "peer", "p")
	var victim *redistest.Server
	for _, srv := range cl.Masters {
		out, _ := srv.CLI(ctx, "CLUSTER", "COUNTKEYSINSLOT", fmt.Sprint(lua.HashSlot(key)))
		if out != "" && out[0] != '0' {
			victim = srv
		}
	}
	if victim == nil {
		t.Fatal("no master holds the bucket")
	}
	victim.Kill()
	sawFallback := false
	admitLoop(t, s, 40*time.Second, func() bool {
		if s.Mode() == ModeFallback {
			sawFallback = true
		}
		return sawFallback && s.Mode() == ModeRedis
	})
	if !sawFallback || s.Mode() != ModeRedis {
		t.Fatalf("mode switches: %v, now %s; want fallback then redis", m.list(), s.Mode())
	}
}
