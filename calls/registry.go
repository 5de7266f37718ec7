package calls

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cpsguard/cpsguard/lua"
	"github.com/cpsguard/cpsguard/policy"
)

// MaxCallID bounds the Call-ID a listed call (Live) and a call record
// keep: a peer chooses its Call-IDs, and every node lists every call.
const MaxCallID = 256

// ClipCallID is s as a listed call keeps it: its first MaxCallID bytes
// (less a rune cut in two) and "…" when longer. Clipping the clipped
// form changes nothing, so an operator may name a call by either.
func ClipCallID(s string) string {
	if len(s) <= MaxCallID {
		return s
	}
	return strings.ToValidUTF8(s[:MaxCallID], "") + "…"
}

// Live is one live call as the pool lists it (GET /api/v1/calls): a call
// forwarded to a carrier and not ended yet.
type Live struct {
	// ID names the call attempt in the registry (a hash of its Call-ID,
	// Via branch and source: two calls may share a Call-ID).
	ID string `json:"id"`
	// CallID is the call's SIP Call-ID, clipped (ClipCallID).
	CallID   string `json:"call_id"`
	Peer     string `json:"peer"`
	Customer string `json:"customer"`
	// Carrier is the carrier the call was sent to last.
	Carrier string `json:"carrier"`
	// Node is the node_id of the node that set the call up; only it can
	// end the call.
	Node      string    `json:"node"`
	StartedAt time.Time `json:"started_at"`
	// AnsweredAt is null until the carrier's 2xx was relayed.
	AnsweredAt *time.Time `json:"answered_at"`
}

// Registry is the pool's list of live calls and the nodes' queues of calls
// to end. Entries expire unless put again (the Tracker refreshes the calls
// it holds), so the calls of a node that died vanish within the ttl.
// Both implementations pass one contract suite.
type Registry interface {
	// Put stores calls, each live for ttl from now unless put again.
	Put(ctx context.Context, ttl time.Duration, calls []Live) error
	// Remove forgets the calls of ids (an unknown id is no error).
	Remove(ctx context.Context, ids []string) error
	// List returns every live call of the pool.
	List(ctx context.Context) ([]Live, error)
	// RequestEnd asks node to end its live calls of callID; the request
	// is dropped when node does not take it within EndRequestTTL.
	RequestEnd(ctx context.Context, node, callID string) error
	// TakeEnds returns, and forgets, the Call-IDs node was asked to end.
	TakeEnds(ctx context.Context, node string) ([]string, error)
}

// EndRequestTTL is how long a request to end a call waits for its node.
const EndRequestTTL = 30 * time.Second

// maxTake bounds the end requests one TakeEnds returns.
const maxTake = 100

// LocalRegistry is the in-process Registry (one node). Its clock is
// injected (time.Now by default). It is safe for concurrent use.
type LocalRegistry struct {
	now func() time.Time

	mu    sync.Mutex
	calls map[string]localLive
	ends  map[string][]localEnd
}

type localLive struct {
	l   Live
	exp time.Time
}

type localEnd struct {
	callID string
	exp    time.Time
}

var _ Registry = (*LocalRegistry)(nil)

// NewLocalRegistry returns an empty LocalRegistry on clock now (nil:
// time.Now).
func NewLocalRegistry(now func() time.Time) *LocalRegistry {
	if now == nil {
		now = time.Now
	}
	return &LocalRegistry{now: now, calls: map[string]localLive{}, ends: map[string][]localEnd{}}
}

// Put implements Registry.
func (r *LocalRegistry) Put(_ context.Context, ttl time.Duration, calls []Live) error {
	if ttl < time.Millisecond {
		return ErrArgs
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	exp := r.now().Add(ttl)
	for _, c := range calls {
		if c.ID == "" {
			return ErrArgs
		}
		r.calls[c.ID] = localLive{l: c, exp: exp}
	}
	return nil
}

// Remove implements Registry.
func (r *LocalRegistry) Remove(_ context.Context, ids []string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range ids {
		delete(r.calls, id)
	}
	return nil
}

// List implements Registry: the live calls, by expiry.
func (r *LocalRegistry) List(context.Context) ([]Live, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	type entry struct {
		l   Live
		exp time.Time
	}
	var es []entry
	for id, c := range r.calls {
		if !c.exp.After(now) {
			delete(r.calls, id)
			continue
		}
		es = append(es, entry{c.l, c.exp})
	}
	slices.SortFunc(es, func(a, b entry) int {
		if c := a.exp.Compare(b.exp); c != 0 {
			return c
		}
		return compareStrings(a.l.ID, b.l.ID)
	})
	out := make([]Live, len(es))
	for i, e := range es {
		out[i] = e.l
	}
	return out, nil
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// RequestEnd implements Registry.
func (r *LocalRegistry) RequestEnd(_ context.Context, node, callID string) error {
	if node == "" || callID == "" {
		return ErrArgs
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ends[node] = append(r.ends[node], localEnd{callID: callID, exp: r.now().Add(EndRequestTTL)})
	return nil
}

// TakeEnds implements Registry.
func (r *LocalRegistry) TakeEnds(_ context.Context, node string) ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	q := r.ends[node]
	var out []string
	n := 0
	for _, e := range q {
		if len(out) == maxTake {
			break
		}
		n++
		if e.exp.After(now) {
			out = append(out, e.callID)
		}
	}
	if rest := q[n:]; len(rest) > 0 {
		r.ends[node] = rest
	} else {
		delete(r.ends, node)
	}
	return out, nil
}

// RedisRegistry shares the live calls of a pool through Redis (live.lua:
// a hash of entries and a sorted set of their expiries on Redis's clock,
// in one hash slot) and each node's end queue (a list beside them, expiring
// EndRequestTTL after its last request). It is safe for concurrent use.
type RedisRegistry struct {
	c       redis.UniversalClient
	prefix  string
	key     string
	timeout time.Duration
	observe func(script string, d time.Duration, err error)
}

var _ Registry = (*RedisRegistry)(nil)

// RegistryOptions configure a RedisRegistry.
type RegistryOptions struct {
	// Timeout bounds one Redis call (store.redis.timeout); 0: the caller's
	// context only.
	Timeout time.Duration
	// Observe is told of every script run (metrics); nil: nobody.
	Observe func(script string, d time.Duration, err error)
}

// NewRedisRegistry keeps the live calls under key prefix
// (store.key_prefix) through c.
func NewRedisRegistry(c redis.UniversalClient, prefix string, o RegistryOptions) *RedisRegistry {
	return &RedisRegistry{c: c, prefix: prefix, key: policy.LiveKey(prefix), timeout: o.Timeout, observe: o.Observe}
}

// putBatch bounds the entries of one live.lua call.
const putBatch = 500

func (r *RedisRegistry) run(ctx context.Context, f func(ctx context.Context) error) error {
	if r.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.timeout)
		defer cancel()
	}
	start := time.Now()
	err := f(ctx)
	if r.observe != nil {
		r.observe(lua.ScriptLive, time.Since(start), err)
	}
	if err != nil {
		return fmt.Errorf("calls: live calls: %w", err)
	}
	return nil
}

// Put implements Registry (one script call per putBatch calls).
func (r *RedisRegistry) Put(ctx context.Context, ttl time.Duration, calls []Live) error {
	if ttl < time.Millisecond {
		return ErrArgs
	}
	for len(calls) > 0 {
		n := min(len(calls), putBatch)
		es := make([]lua.LiveEntry, n)
		for i, c := range calls[:n] {
			if c.ID == "" {
				return ErrArgs
			}
			b, err := json.Marshal(c)
			if err != nil {
				return fmt.Errorf("calls: encode live call: %w", err)
			}
			es[i] = lua.LiveEntry{ID: c.ID, Value: string(b)}
		}
		if err := r.run(ctx, func(ctx context.Context) error {
			_, err := lua.PutLive(ctx, r.c, r.key, ttl, es)
			return err
		}); err != nil {
			return err
		}
		calls = calls[n:]
	}
	return nil
}

// Remove implements Registry.
func (r *RedisRegistry) Remove(ctx context.Context, ids []string) error {
	for len(ids) > 0 {
		n := min(len(ids), putBatch)
		batch := ids[:n]
		if err := r.run(ctx, func(ctx context.Context) error {
			_, err := lua.DeleteLive(ctx, r.c, r.key, batch)
			return err
		}); err != nil {
			return err
		}
		ids = ids[n:]
	}
	return nil
}

// List implements Registry: the live calls, by expiry. An entry that does
// not decode (another version's) is left out.
func (r *RedisRegistry) List(ctx context.Context) ([]Live, error) {
	var es []lua.LiveEntry
	if err := r.run(ctx, func(ctx context.Context) (err error) {
		es, err = lua.ListLive(ctx, r.c, r.key)
		return err
	}); err != nil {
		return nil, err
	}
	out := make([]Live, 0, len(es))
	for _, e := range es {
		var l Live
		if err := json.Unmarshal([]byte(e.Value), &l); err != nil || l.ID != e.ID {
			continue
		}
		out = append(out, l)
	}
	return out, nil
}

// RequestEnd implements Registry: RPUSH to node's queue, which expires
// EndRequestTTL after the last request.
func (r *RedisRegistry) RequestEnd(ctx context.Context, node, callID string) error {
	if node == "" || callID == "" {
		return ErrArgs
	}
	key := policy.LiveEndKey(r.prefix, node)
	return r.cmd(ctx, func(ctx context.Context) error {
		_, err := r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.RPush(ctx, key, callID)
			p.PExpire(ctx, key, EndRequestTTL)
			return nil
		})
		return err
	})
}

// TakeEnds implements Registry: LPOP of up to maxTake requests.
func (r *RedisRegistry) TakeEnds(ctx context.Context, node string) ([]string, error) {
	var out []string
	err := r.cmd(ctx, func(ctx context.Context) error {
		v, err := r.c.LPopCount(ctx, policy.LiveEndKey(r.prefix, node), maxTake).Result()
		if err == redis.Nil {
			return nil
		}
		out = v
		return err
	})
	return out, err
}

func (r *RedisRegistry) cmd(ctx context.Context, f func(ctx context.Context) error) error {
	if r.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.timeout)
		defer cancel()
	}
	if err := f(ctx); err != nil {
		return fmt.Errorf("calls: end requests: %w", err)
	}
	return nil
}
