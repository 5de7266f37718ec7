package admission

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cpsguard/cpsguard/internal/redistest"
	"github.com/cpsguard/cpsguard/lua"
)

// A hung Redis never blocks a call longer than the store's timeout, and the
// observer sees every script run with its error.
func TestRedisTimeoutAndObserver(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	defer c.Close()
	var mu sync.Mutex
	var seen []error
	s := NewRedisStore(c, RedisOptions{
		Timeout: 100 * time.Millisecond,
		Observe: func(script string, d time.Duration, err error) {
			mu.Lock()
			defer mu.Unlock()
			if script != lua.ScriptAdmit {
				t.Errorf("observed script %q, want %q", script, lua.ScriptAdmit)
			}
			seen = append(seen, err)
		},
	})
	ctx := context.Background()
	if err := s.Load(ctx); err != nil {
		t.Fatal(err)
	}
	bk := Bucket{Key: lua.Key("test", "peer", "p"), Limit: 5, Window: time.Second}
	if _, err := s.Admit(ctx, "a", []Bucket{bk}); err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	defer srv.Resume()
	start := time.Now()
	_, err := s.Admit(ctx, "b", []Bucket{bk})
	if took := time.Since(start); err == nil || took > 2*time.Second {
		t.Fatalf("Admit on a hung Redis: got %v after %v, want an error within about 100ms", err, took)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 || seen[0] != nil || seen[1] == nil {
		t.Fatalf("observed errors %v, want [nil, error]", seen)
	}
}
