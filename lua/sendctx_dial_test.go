package lua

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A lone call that needs a new connection, to a Redis whose connect
// hangs (a lost network, not a paused server, whose kernel still
// accepts), fails at its round trip bound: go-redis waits for a dial on
// the context's Done only, not its deadline.
func TestRoundTripBoundsTheDialWait(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true, MaxRetries: -1,
		PoolSize: 4, DialTimeout: time.Minute, DialerRetries: 1,
		Dialer: func(ctx context.Context, _, _ string) (net.Conn, error) {
			select { // the connect never completes
			case <-ctx.Done():
			case <-release:
			}
			return nil, context.DeadlineExceeded
		}})
	defer c.Close()
	p := NewPipeliner(c, PipelineOptions{})
	defer p.Close()
	ctx, cancel := WithTimeout(context.Background(), time.Second)
	defer cancel()
	b := AdmitBucket{Key: Key("dialtest", "peer", "rt"), Limit: 10, WindowUS: 60_000_000}
	_, err := Admit(ctx, p, "lone", []AdmitBucket{b})
	if err == nil {
		t.Fatal("admitted through a Redis that cannot be reached")
	}
	if ctx.Err() != nil {
		t.Fatalf("the whole call's bound had passed when the call failed (%v): the dial wait was not bounded by the round trip", err)
	}
}
