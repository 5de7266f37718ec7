package lua

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed dialogs_ended.lua
	dialogsEndedSrc string

	dialogsEndedScript = redis.NewScript(dialogsEndedSrc)
)

// ScriptDialogsEnded is the name of dialogs_ended.lua (observers, metrics
// labels).
const ScriptDialogsEnded = "dialogs_ended"

// MaxEndsPerCall is the most ends one dialogs_ended.lua call records.
// Each is a ZADD inside the script, during which Redis serves nothing
// else; a page must be larger (the ends of one call share a score, and a
// reader moves on from a full page's last score).
const MaxEndsPerCall = 200

// EndedReply is the decoded reply of dialogs_ended.lua.
type EndedReply struct {
	// NowUS is Redis TIME at the call, in µs.
	NowUS int64
	// Next is the cursor of the next call.
	Next int64
	// More reports ends beyond the page.
	More bool
	// Ends are the ends read, oldest first.
	Ends []string
}

// DialogsEnded runs dialogs_ended.lua on the set at key: it records ends
// (at most MaxEndsPerCall), keeps the set to ttlUS and limit entries, and
// reads at most page ends (more than MaxEndsPerCall) recorded at or after
// cursorUS and before this call.
func DialogsEnded(ctx context.Context, c redis.Scripter, key string, ttlUS, limit, cursorUS, page int64, ends []string) (EndedReply, error) {
	if ttlUS <= 0 || limit <= 0 || page <= MaxEndsPerCall || cursorUS < 0 || len(ends) > MaxEndsPerCall {
		return EndedReply{}, fmt.Errorf("%w: dialogs_ended: ttl %dµs, limit %d, page %d, cursor %d, %d ends", ErrArgs, ttlUS, limit, page, cursorUS, len(ends))
	}
	args := make([]any, 4, 4+len(ends))
	args[0], args[1], args[2], args[3] = ttlUS, limit, cursorUS, page
	for _, e := range ends {
		args = append(args, e)
	}
	v, err := dialogsEndedScript.Run(ctx, c, []string{key}, args...).Result()
	if err != nil {
		return EndedReply{}, err
	}
	return DecodeEnded(v, page)
}

// DecodeEnded decodes a dialogs_ended.lua reply of at most page ends. It
// never panics.
func DecodeEnded(v any, page int64) (EndedReply, error) {
	arr, ok := v.([]any)
	if !ok || len(arr) < 3 || int64(len(arr)-3) > page {
		return EndedReply{}, fmt.Errorf("%w: dialogs_ended: got %T %v", ErrReply, v, v)
	}
	var head [3]int64
	for i := range head {
		x, ok := arr[i].(int64)
		if !ok || x < 0 {
			return EndedReply{}, fmt.Errorf("%w: dialogs_ended: element %d is %T %v", ErrReply, i, arr[i], arr[i])
		}
		head[i] = x
	}
	if head[2] > 1 || head[1] > head[0]+1 {
		return EndedReply{}, fmt.Errorf("%w: dialogs_ended: header %v", ErrReply, head)
	}
	r := EndedReply{NowUS: head[0], Next: head[1], More: head[2] == 1, Ends: make([]string, 0, len(arr)-3)}
	for i, e := range arr[3:] {
		s, ok := e.(string)
		if !ok {
			return EndedReply{}, fmt.Errorf("%w: dialogs_ended: end %d is %T", ErrReply, i, e)
		}
		r.Ends = append(r.Ends, s)
	}
	return r, nil
}
