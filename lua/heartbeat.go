package lua

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed heartbeat.lua
var heartbeatSrc string

var heartbeatScript = redis.NewScript(heartbeatSrc)

// ScriptHeartbeat names heartbeat.lua in observers and metrics.
const ScriptHeartbeat = "heartbeat"

// Heartbeat records node's beat in the node set key and returns how many nodes
// beat within ttl, this one included.
func Heartbeat(ctx context.Context, c redis.Scripter, key, node string, ttl time.Duration) (int, error) {
	if node == "" || ttl < time.Millisecond {
		return 0, fmt.Errorf("%w: heartbeat needs a node id and a ttl >= 1ms", ErrArgs)
	}
	v, err := heartbeatScript.Run(ctx, c, []string{key}, node, ttl.Milliseconds()).Result()
	if err != nil {
		return 0, fmt.Errorf("lua: run heartbeat.lua for %q: %w", key, err)
	}
	return DecodeHeartbeat(v)
}

// DecodeHeartbeat decodes heartbeat.lua's reply.
func DecodeHeartbeat(v any) (int, error) {
	n, ok := v.(int64)
	if !ok || n < 1 {
		return 0, fmt.Errorf("%w: heartbeat: want a positive integer, got %T %v", ErrReply, v, v)
	}
	return int(n), nil
}

// Heartbeater adapts a Redis client to store.Beater.
type Heartbeater struct {
	Client redis.Scripter
	// Key is the node set, e.g. Key(prefix, "nodes", "all").
	Key string
}

// Beat implements store.Beater.
func (h Heartbeater) Beat(ctx context.Context, node string, ttl time.Duration) (int, error) {
	return Heartbeat(ctx, h.Client, h.Key, node, ttl)
}
