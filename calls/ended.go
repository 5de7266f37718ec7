package calls

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cpsguard/cpsguard/lua"
)

// Bounds of RedisEnded.
const (
	// MaxEnded is the most ended dialogs a pool's set keeps (the oldest go
	// first): about 100 bytes of Redis memory each.
	MaxEnded = 1 << 18
	// EndedPage is the most ends one Sync returns: Redis serves nothing
	// else while the script reads them. A reader moves on from a full
	// page's last score, which all the ends of one call share, so a page
	// is larger than one call's ends: lua.MaxEndsPerCall, and the 1,000
	// of the releases before it, which a pool upgraded node by node
	// still runs.
	EndedPage = 1024
)

// RedisEnded is a pool's record of the dialogs that ended: each node
// records the ends it saw and reads the others' (sip.DialogEnds), one
// dialogs_ended.lua call per Sync on a sorted set scored by Redis TIME, so
// nodes with skewed clocks still agree on the order. The set is bounded
// (ttl, MaxEnded) and vanishes when idle. Safe for concurrent use.
type RedisEnded struct {
	run *lua.Runner
	key string
}

// NewRedisEnded returns the record at key (policy.EndedDialogsKey) on c.
// The script is loaded by lua.Load.
func NewRedisEnded(c redis.UniversalClient, key string, opt RedisOptions) *RedisEnded {
	return &RedisEnded{run: lua.NewRunner(c, opt), key: key}
}

// Sync records ended (at most lua.MaxEndsPerCall), each kept for ttl, and
// returns up to EndedPage ends recorded at or after cursor (Redis µs, 0 for
// the oldest kept), the cursor to pass next, and whether more follow. The
// ends recorded by this call are not returned (a node still paging reads
// them on a later page).
func (e *RedisEnded) Sync(ctx context.Context, cursor int64, ended []string, ttl time.Duration) ([]string, int64, bool, error) {
	if len(ended) > lua.MaxEndsPerCall {
		return nil, cursor, false, fmt.Errorf("calls: %d ends in one sync, at most %d", len(ended), lua.MaxEndsPerCall)
	}
	var r lua.EndedReply
	err := e.run.Run(ctx, lua.ScriptDialogsEnded, func(ctx context.Context, sc redis.Scripter) (err error) {
		r, err = lua.DialogsEnded(ctx, sc, e.key, lua.Micros(ttl), MaxEnded, cursor, EndedPage, ended)
		return err
	})
	if err != nil {
		return nil, cursor, false, fmt.Errorf("calls: %q: %w", e.key, err)
	}
	return r.Ends, r.Next, r.More, nil
}
