package lua

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed live.lua
var liveSrc string

var liveScript = redis.NewScript(liveSrc)

// ScriptLive names live.lua in observers and metrics.
const ScriptLive = "live"

// LiveExpiryKey is the sorted set of expiries kept beside the live calls'
// hash key, in the same Cluster hash slot.
func LiveExpiryKey(key string) string { return key + ":expiry" }

// LiveEntry is one live call as live.lua stores it.
type LiveEntry struct {
	// ID is the call's id (one per call attempt).
	ID string
	// Value is the call's encoding (cpsguard's own; the script does not
	// read it).
	Value string
}

// PutLive stores entries in the live calls' hash key, each expiring ttl
// (>= 1 ms) from Redis's now, and returns how many it wrote.
func PutLive(ctx context.Context, c redis.Scripter, key string, ttl time.Duration, entries []LiveEntry) (int, error) {
	if ttl < time.Millisecond {
		return 0, fmt.Errorf("%w: put live calls needs a ttl >= 1ms", ErrArgs)
	}
	args := make([]any, 0, 2+2*len(entries))
	args = append(args, "put", strconv.FormatInt(ttl.Milliseconds(), 10))
	for _, e := range entries {
		if e.ID == "" || e.Value == "" {
			return 0, fmt.Errorf("%w: live call without id or value", ErrArgs)
		}
		args = append(args, e.ID, e.Value)
	}
	v, err := runLive(ctx, c, key, args)
	if err != nil {
		return 0, err
	}
	return DecodeLiveCount(v)
}

// DeleteLive removes ids from the live calls' hash key and returns how
// many were there.
func DeleteLive(ctx context.Context, c redis.Scripter, key string, ids []string) (int, error) {
	args := make([]any, 0, 1+len(ids))
	args = append(args, "del")
	for _, id := range ids {
		args = append(args, id)
	}
	v, err := runLive(ctx, c, key, args)
	if err != nil {
		return 0, err
	}
	return DecodeLiveCount(v)
}

// ListLive returns every live call of the hash key, by expiry.
func ListLive(ctx context.Context, c redis.Scripter, key string) ([]LiveEntry, error) {
	v, err := runLive(ctx, c, key, []any{"list"})
	if err != nil {
		return nil, err
	}
	return DecodeLiveList(v)
}

func runLive(ctx context.Context, c redis.Scripter, key string, args []any) (any, error) {
	v, err := liveScript.Run(ctx, c, []string{key, LiveExpiryKey(key)}, args...).Result()
	if err != nil {
		return nil, fmt.Errorf("lua: run live.lua %v for %q: %w", args[0], key, err)
	}
	return v, nil
}

// DecodeLiveCount decodes live.lua's reply to put and del: {now, n}. It
// never panics.
func DecodeLiveCount(v any) (int, error) {
	a, err := ints(v, 2, ScriptLive)
	if err != nil {
		return 0, err
	}
	if a[0] < 0 || a[1] < 0 {
		return 0, fmt.Errorf("%w: live: got %v", ErrReply, a)
	}
	return int(a[1]), nil
}

// DecodeLiveList decodes live.lua's reply to list: {now, id, value, ...}.
// It never panics.
func DecodeLiveList(v any) ([]LiveEntry, error) {
	a, ok := v.([]any)
	if !ok || len(a) < 1 || (len(a)-1)%2 != 0 {
		return nil, fmt.Errorf("%w: live: want an array {now, (id, value)...}, got %T %v", ErrReply, v, v)
	}
	if now, ok := a[0].(int64); !ok || now < 0 {
		return nil, fmt.Errorf("%w: live: want a time, got %T %v", ErrReply, a[0], a[0])
	}
	out := make([]LiveEntry, 0, (len(a)-1)/2)
	for i := 1; i < len(a); i += 2 {
		id, ok1 := a[i].(string)
		val, ok2 := a[i+1].(string)
		if !ok1 || !ok2 || id == "" || val == "" {
			return nil, fmt.Errorf("%w: live: want id, value; got %v %v", ErrReply, a[i], a[i+1])
		}
		out = append(out, LiveEntry{ID: id, Value: val})
	}
	return out, nil
}
