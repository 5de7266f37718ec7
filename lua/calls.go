package lua

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed calls_occupy.lua
	callsOccupySrc string
	//go:embed calls_free.lua
	callsFreeSrc string
	//go:embed calls_refresh.lua
	callsRefreshSrc string
	//go:embed calls_count.lua
	callsCountSrc string

	callsOccupyScript  = redis.NewScript(callsOccupySrc)
	callsFreeScript    = redis.NewScript(callsFreeSrc)
	callsRefreshScript = redis.NewScript(callsRefreshSrc)
	callsCountScript   = redis.NewScript(callsCountSrc)
)

// Script names of the concurrent-call scripts (observers, metrics labels).
const (
	ScriptCallsOccupy  = "calls_occupy"
	ScriptCallsFree    = "calls_free"
	ScriptCallsRefresh = "calls_refresh"
	ScriptCallsCount   = "calls_count"
)

// CallPlace is one concurrent-call set of a calls_occupy.lua call.
type CallPlace struct {
	// Key is the place's sorted set.
	Key string
	// Limit is the number of live calls the place may hold (> 0).
	Limit int64
}

// OccupyReply is the decoded reply of calls_occupy.lua.
type OccupyReply struct {
	// Admitted reports the member holds a place in every set (added now,
	// or already there when Duplicate).
	Admitted bool
	// Refused is the 0-based index of the first full set, -1 when admitted.
	Refused int
	// Duplicate reports the member was already live; nothing was counted.
	Duplicate bool
	// NowUS is Redis TIME at the decision, in µs.
	NowUS int64
	// Counts holds the live calls in each set after the decision.
	Counts []int64
}

// Occupy runs calls_occupy.lua: member takes a place in every set, or in
// none when one is full; each place expires ttlUS after Redis's now unless
// refreshed. All keys must hash to one Cluster slot.
func Occupy(ctx context.Context, c redis.Scripter, member string, ttlUS int64, places []CallPlace) (OccupyReply, error) {
	if len(places) == 0 {
		return OccupyReply{}, fmt.Errorf("%w: occupy needs at least one place", ErrArgs)
	}
	if ttlUS <= 0 {
		return OccupyReply{}, fmt.Errorf("%w: occupy: ttl %dµs must be > 0", ErrArgs, ttlUS)
	}
	keys := make([]string, len(places))
	args := make([]any, 2, 2+len(places))
	args[0], args[1] = member, ttlUS
	for i, p := range places {
		if p.Limit <= 0 {
			return OccupyReply{}, fmt.Errorf("%w: place %q: limit %d must be > 0", ErrArgs, p.Key, p.Limit)
		}
		keys[i] = p.Key
		args = append(args, p.Limit)
	}
	v, err := callsOccupyScript.Run(ctx, c, keys, args...).Result()
	if err != nil {
		return OccupyReply{}, err
	}
	return DecodeOccupy(v, len(places))
}

// DecodeOccupy decodes a calls_occupy.lua reply for n places. It never
// panics; a reply of the wrong shape is an error wrapping ErrReply.
func DecodeOccupy(v any, n int) (OccupyReply, error) {
	a, err := ints(v, 4+n, ScriptCallsOccupy)
	if err != nil {
		return OccupyReply{}, err
	}
	r := OccupyReply{Admitted: a[0] == 1, Refused: int(a[1]), Duplicate: a[2] == 1, NowUS: a[3], Counts: a[4:]}
	switch {
	case a[0] != 0 && a[0] != 1, a[2] != 0 && a[2] != 1:
		return OccupyReply{}, fmt.Errorf("%w: calls_occupy: flags %d/%d not 0 or 1", ErrReply, a[0], a[2])
	case r.Admitted && a[1] != -1, !r.Admitted && (a[1] < 0 || a[1] >= int64(n)):
		return OccupyReply{}, fmt.Errorf("%w: calls_occupy: refused index %d with admitted=%v for %d places", ErrReply, a[1], r.Admitted, n)
	case r.Duplicate && !r.Admitted:
		return OccupyReply{}, fmt.Errorf("%w: calls_occupy: duplicate but not admitted", ErrReply)
	case r.NowUS < 0:
		return OccupyReply{}, fmt.Errorf("%w: calls_occupy: negative time %d", ErrReply, r.NowUS)
	}
	for i, c := range r.Counts {
		if c < 0 {
			return OccupyReply{}, fmt.Errorf("%w: calls_occupy: negative count %d for place %d", ErrReply, c, i)
		}
	}
	return r, nil
}

// FreeCall runs calls_free.lua: member leaves every set in keys (which must
// share one Cluster slot). It returns how many places were freed; a member
// that held none frees nothing.
func FreeCall(ctx context.Context, c redis.Scripter, member string, keys []string) (int64, error) {
	if len(keys) == 0 {
		return 0, fmt.Errorf("%w: free needs at least one place", ErrArgs)
	}
	v, err := callsFreeScript.Run(ctx, c, keys, member).Result()
	if err != nil {
		return 0, err
	}
	return DecodeFree(v, len(keys))
}

// DecodeFree decodes a calls_free.lua reply for n places. It never panics.
func DecodeFree(v any, n int) (int64, error) {
	x, ok := v.(int64)
	if !ok || x < 0 || x > int64(n) {
		return 0, fmt.Errorf("%w: calls_free: got %T %v, want an integer in [0, %d]", ErrReply, v, v, n)
	}
	return x, nil
}

// RefreshReply is the decoded reply of calls_refresh.lua.
type RefreshReply struct {
	// Refreshed is the number of members that were still in the set and
	// now expire ttl after NowUS.
	Refreshed int64
	// Restored is the number of members that were missing from the set and
	// were added back (they expire ttl after NowUS too).
	Restored int64
	// Live is the number of live calls in the set after the refresh.
	Live int64
	// NowUS is Redis TIME at the refresh, in µs.
	NowUS int64
}

// RefreshCalls runs calls_refresh.lua: every member named (calls the caller
// holds live) expires ttlUS after Redis's now in the set at key; members
// missing from it are added back.
func RefreshCalls(ctx context.Context, c redis.Scripter, key string, ttlUS int64, members []string) (RefreshReply, error) {
	if ttlUS <= 0 {
		return RefreshReply{}, fmt.Errorf("%w: refresh %q: ttl %dµs must be > 0", ErrArgs, key, ttlUS)
	}
	args := make([]any, 1, 1+len(members))
	args[0] = ttlUS
	for _, m := range members {
		args = append(args, m)
	}
	v, err := callsRefreshScript.Run(ctx, c, []string{key}, args...).Result()
	if err != nil {
		return RefreshReply{}, err
	}
	return DecodeRefresh(v, len(members))
}

// DecodeRefresh decodes a calls_refresh.lua reply for n members. It never
// panics.
func DecodeRefresh(v any, n int) (RefreshReply, error) {
	a, err := ints(v, 4, ScriptCallsRefresh)
	if err != nil {
		return RefreshReply{}, err
	}
	if a[0] < 0 || a[1] < 0 || a[0]+a[1] != int64(n) || a[2] < a[0]+a[1] || a[3] < 0 {
		return RefreshReply{}, fmt.Errorf("%w: calls_refresh: got %v for %d members", ErrReply, a, n)
	}
	return RefreshReply{Refreshed: a[0], Restored: a[1], Live: a[2], NowUS: a[3]}, nil
}

// CountCalls runs calls_count.lua: the live calls in each set (read-only).
// Keys must share one Cluster slot.
func CountCalls(ctx context.Context, c redis.Scripter, keys []string) (CountsReply, error) {
	if len(keys) == 0 {
		return CountsReply{}, fmt.Errorf("%w: count needs at least one place", ErrArgs)
	}
	v, err := callsCountScript.Run(ctx, c, keys).Result()
	if err != nil {
		return CountsReply{}, err
	}
	return DecodeCounts(v, len(keys))
}
