package store

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/cpsguard/cpsguard/admission"
	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/panics"
	"github.com/cpsguard/cpsguard/internal/redistest"
	"github.com/cpsguard/cpsguard/lua"
)

// TestHostileRedisIsAStoreFailure: a server on Redis' address whose replies
// announce an impossible length (go-redis' reader panics on them) makes the
// store fail over; the process does not die, and the panics are counted.
func TestHostileRedisIsAStoreFailure(t *testing.T) {
	ctx := t.Context()
	s, count := openHostile(t, redistest.StartHostile(t))
	for i := 0; i < 5; i++ {
		d, err := s.Admit(ctx, "call-"+string(rune('a'+i)), []admission.Bucket{{Key: "t:{peer:p}", Limit: 10, Window: time.Second}})
		if err != nil || !d.Admit {
			t.Fatalf("admit %d on the fallback: %+v, %v", i, d, err)
		}
	}
	if s.Mode() != ModeFallback {
		t.Errorf("mode %s, want %s", s.Mode(), ModeFallback)
	}
	if n := testutil.ToFloat64(count.WithLabelValues("store.redis")); n < 1 {
		t.Errorf("panics_total{store.redis} = %v, want >= 1", n)
	}
}

// A Cluster runs its commands on a client per node, which does not inherit
// the cluster client's hooks, and some in goroutines of go-redis's own
// (lua.Load's ForEachShard, a pipeline's per-node batches): a hostile
// master's reply there ended the process (h62). The hook is now added to
// every node's client as it is made. Both paths: the scripts' load (at
// start and in the probe), and concurrent calls batched by the pipeliner.
func TestHostileClusterIsAStoreFailure(t *testing.T) {
	for _, cached := range []bool{false, true} {
		t.Run(fmt.Sprint("scripts cached ", cached), func(t *testing.T) {
			ctx := t.Context()
			s, count := openHostile(t, redistest.StartHostileCluster(t, cached), redistest.StartHostileCluster(t, cached))
			if _, ok := s.client.(*redis.ClusterClient); !ok {
				t.Fatalf("client %T, want a ClusterClient for two addresses", s.client)
			}
			var wg sync.WaitGroup
			for i := range 8 { // concurrent: the pipeliner batches them
				wg.Go(func() {
					d, err := s.Admit(ctx, fmt.Sprint("call-", i), []admission.Bucket{{Key: "t:{peer:p}", Limit: 10, Window: time.Second}})
					if err != nil || !d.Admit {
						t.Errorf("admit %d on the fallback: %+v, %v", i, d, err)
					}
				})
			}
			wg.Wait()
			waitMode(t, s, ModeFallback)
			// The pipeliner's batches are cluster pipelines: run on the
			// node's client, in a goroutine of go-redis's.
			_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
				p.EvalSha(ctx, lua.SHA(lua.ScriptAdmit), []string{"t:{peer:p}"})
				p.EvalSha(ctx, lua.SHA(lua.ScriptAdmit), []string{"t:{peer:q}"})
				return nil
			})
			if err == nil {
				t.Errorf("a pipeline on the hostile cluster: no error")
			}
			if n := testutil.ToFloat64(count.WithLabelValues("store.redis")); n < 1 {
				t.Errorf("panics_total{store.redis} = %v, want >= 1", n)
			}
		})
	}
}

// openHostile opens and runs the stores (on_error local, timeout 200 ms)
// on the fake Redis at addrs until the test ends, counting panics in the
// counter it returns.
func openHostile(t *testing.T, addrs ...string) (*Stores, *prometheus.CounterVec) {
	t.Helper()
	cfg := &config.Config{NodeID: "n1", Store: config.Store{KeyPrefix: "t", OnError: "local",
		Redis: &config.Redis{Addrs: addrs, Timeout: 200 * time.Millisecond}}}
	count := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "panics_total"}, []string{"where"})
	ctx, cancel := context.WithCancel(context.Background())
	s, err := Open(ctx, cfg, OpenOptions{Logger: slog.New(slog.DiscardHandler),
		Panics: &panics.Reporter{Log: slog.New(slog.DiscardHandler), Count: count}})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done; _ = s.Close() })
	return s, count
}
