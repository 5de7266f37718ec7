package lua

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed rebook.lua
var rebookSrc string

var rebookScript = redis.NewScript(rebookSrc)

// ScriptRebook names rebook.lua in observers and metrics.
const ScriptRebook = "rebook"

// Waiting is one waiting call's slot, as Rebook puts it back: its member
// and how long from now it is due.
type Waiting struct {
	Member string
	In     time.Duration
}

// Rebook puts slots back into the slot set key (pace.lua's) that lost
// them, each at its due time on Redis's clock; a member already there
// keeps its slot. keep is how long the set must outlive its last slot
// (pace.lua's: max(interval, 1 s)). It returns the slots added.
func Rebook(ctx context.Context, c redis.Scripter, key string, keep time.Duration, slots []Waiting) (int, error) {
	if len(slots) == 0 {
		return 0, nil
	}
	if keep <= 0 {
		return 0, fmt.Errorf("%w: rebook %q: keep %v must be > 0", ErrArgs, key, keep)
	}
	args := make([]any, 1, 1+2*len(slots))
	args[0] = Micros(keep)
	for _, s := range slots {
		args = append(args, s.Member, Micros(max(s.In, 0)))
	}
	v, err := rebookScript.Run(ctx, c, []string{key}, args...).Int()
	if err != nil {
		return 0, fmt.Errorf("lua: run rebook.lua for %q: %w", key, err)
	}
	return v, nil
}
