package store

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cpsguard/cpsguard/admission"
	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/panics"
	"github.com/cpsguard/cpsguard/internal/redistest"
)

// TestHostileRedisIsAStoreFailure: a server on Redis' address whose replies
// announce an impossible length (go-redis' reader panics on them) makes the
// store fail over; the process does not die, and the panics are counted.
func TestHostileRedisIsAStoreFailure(t *testing.T) {
	addr := redistest.StartHostile(t)
	cfg := &config.Config{NodeID: "n1", Store: config.Store{KeyPrefix: "t", OnError: "local",
		Redis: &config.Redis{Addrs: []string{addr}, Timeout: 200 * time.Millisecond}}}
	count := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "panics_total"}, []string{"where"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := Open(ctx, cfg, OpenOptions{Logger: slog.New(slog.DiscardHandler),
		Panics: &panics.Reporter{Log: slog.New(slog.DiscardHandler), Count: count}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	go s.Run(ctx)
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
