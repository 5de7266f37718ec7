package lua

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed overrides.lua
var overridesSrc string

var overridesScript = redis.NewScript(overridesSrc)

// ScriptOverrides names overrides.lua in observers and metrics.
const ScriptOverrides = "overrides"

// OverridesExpiryKey is the sorted set of expiries kept beside the
// overrides hash key, in the same Cluster hash slot.
func OverridesExpiryKey(key string) string { return key + ":expiry" }

// OverrideEntry is one live override as overrides.lua stores it.
type OverrideEntry struct {
	// Field is "scope/name".
	Field string
	// Left is how long the override has to live, by Redis's clock.
	Left time.Duration
	// Value is the override's encoding (cpsguard's own; the script does not
	// read it).
	Value string
}

// SetOverride stores value under field in the overrides hash key for ttl
// (>= 1 ms) and returns the override it replaced, if any.
func SetOverride(ctx context.Context, c redis.Scripter, key, field, value string, ttl time.Duration) (*OverrideEntry, error) {
	if field == "" || value == "" || ttl < time.Millisecond {
		return nil, fmt.Errorf("%w: set override needs a field, a value and a ttl >= 1ms", ErrArgs)
	}
	es, err := runOverrides(ctx, c, key, "set", field, value, ttl.Milliseconds())
	if err != nil {
		return nil, err
	}
	return first(es), nil
}

// DeleteOverride removes field from the overrides hash key and returns the
// override it removed, if any (nil when there was none live).
func DeleteOverride(ctx context.Context, c redis.Scripter, key, field string) (*OverrideEntry, error) {
	if field == "" {
		return nil, fmt.Errorf("%w: delete override needs a field", ErrArgs)
	}
	es, err := runOverrides(ctx, c, key, "del", field, "", 0)
	if err != nil {
		return nil, err
	}
	return first(es), nil
}

// ListOverrides returns every live override of the hash key, by expiry.
func ListOverrides(ctx context.Context, c redis.Scripter, key string) ([]OverrideEntry, error) {
	return runOverrides(ctx, c, key, "list", "", "", 0)
}

func first(es []OverrideEntry) *OverrideEntry {
	if len(es) == 0 {
		return nil
	}
	return &es[0]
}

func runOverrides(ctx context.Context, c redis.Scripter, key, op, field, value string, ttlMS int64) ([]OverrideEntry, error) {
	v, err := overridesScript.Run(ctx, c, []string{key, OverridesExpiryKey(key)},
		op, field, value, strconv.FormatInt(ttlMS, 10)).Result()
	if err != nil {
		return nil, fmt.Errorf("lua: run overrides.lua %s for %q: %w", op, key, err)
	}
	return DecodeOverrides(v)
}

// DecodeOverrides decodes overrides.lua's reply: {now, field, left, value, ...}.
func DecodeOverrides(v any) ([]OverrideEntry, error) {
	a, ok := v.([]any)
	if !ok || len(a) < 1 || (len(a)-1)%3 != 0 {
		return nil, fmt.Errorf("%w: overrides: want an array {now, (field, left, value)...}, got %T %v", ErrReply, v, v)
	}
	if now, ok := a[0].(int64); !ok || now < 0 {
		return nil, fmt.Errorf("%w: overrides: want a time, got %T %v", ErrReply, a[0], a[0])
	}
	var es []OverrideEntry
	for i := 1; i < len(a); i += 3 {
		f, ok1 := a[i].(string)
		left, ok2 := a[i+1].(int64)
		val, ok3 := a[i+2].(string)
		if !ok1 || !ok2 || !ok3 || f == "" || val == "" || left < 0 {
			return nil, fmt.Errorf("%w: overrides: want field, ms left, value; got %v %v %v", ErrReply, a[i], a[i+1], a[i+2])
		}
		es = append(es, OverrideEntry{Field: f, Left: time.Duration(left) * time.Millisecond, Value: val})
	}
	return es, nil
}
