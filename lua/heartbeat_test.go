package lua

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cpsguard/cpsguard/internal/redistest"
)

func TestHeartbeatCountsLiveNodes(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer c.Close()
	ctx := context.Background()
	key := Key("hbtest", "nodes", "all")
	for i, node := range []string{"a", "b", "a", "c"} {
		n, err := Heartbeat(ctx, c, key, node, 300*time.Millisecond)
		if err != nil {
			t.Fatalf("beat %d: %v", i, err)
		}
		want := []int{1, 2, 2, 3}[i]
		if n != want {
			t.Fatalf("beat %d (%s): got %d live, want %d", i, node, n, want)
		}
	}
	time.Sleep(400 * time.Millisecond) // every beat is now older than the ttl
	n, err := Heartbeat(ctx, c, key, "b", 300*time.Millisecond)
	if err != nil || n != 1 {
		t.Fatalf("after ttl: got %d, %v; want 1 live", n, err)
	}
	if ttl := c.PTTL(ctx, key).Val(); ttl <= 0 {
		t.Fatalf("node set has no TTL (%v)", ttl)
	}
}

func FuzzDecodeHeartbeat(f *testing.F) {
	f.Add(int64(1))
	f.Add(int64(0))
	f.Add(int64(-5))
	f.Fuzz(func(t *testing.T, n int64) {
		got, err := DecodeHeartbeat(n)
		if (err == nil) != (n >= 1) {
			t.Fatalf("DecodeHeartbeat(%d) = %d, %v", n, got, err)
		}
		if _, err := DecodeHeartbeat("x"); err == nil {
			t.Fatal("string reply accepted")
		}
	})
}
