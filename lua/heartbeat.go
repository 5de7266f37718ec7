package lua

import (
	"context"
	_ "embed"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed heartbeat.lua
var heartbeatSrc string

var heartbeatScript = redis.NewScript(heartbeatSrc)

// ScriptHeartbeat names heartbeat.lua in observers and metrics.
const ScriptHeartbeat = "heartbeat"

// Beat is one heartbeat of one process.
type Beat struct {
	// Node is the node id (required).
	Node string
	// Instance identifies this process among those of Node; empty turns the
	// search for other processes off.
	Instance string
	// TTL is how long a beat keeps a node live (>= 1 ms).
	TTL time.Duration
	// Since is BeatReply.Now of this process's first beat (0 on the first
	// beat): only processes that beat after it count as others, so a
	// restarted node does not take its dead predecessor for a second one.
	Since int64
}

// BeatReply is heartbeat.lua's answer.
type BeatReply struct {
	// Live is the number of live nodes, this one included, or of live
	// processes when there are more (two processes under one node id).
	Live int
	// Now is Redis's clock in ms when the beat was recorded.
	Now int64
	// Older is the number of live nodes, or of live processes when more,
	// of a release that cannot read dialog tokens in opaque text (they beat
	// without declaring it in OpaqueReadersKey): while it is not 0, nodes
	// mint the tokens and stateless branches those read.
	Older int
	// Others are the instance ids of the other live processes beating under
	// Beat.Node since Beat.Since.
	Others []string
}

// InstancesKey is the process set heartbeat.lua keeps beside the node set
// nodes, in the same Cluster hash slot.
func InstancesKey(nodes string) string { return nodes + ":instances" }

// OpaqueReadersKey is the set of the processes that read dialog tokens in
// opaque text, which heartbeat.lua keeps beside the node set nodes, in the
// same Cluster hash slot.
func OpaqueReadersKey(nodes string) string { return nodes + ":opaque" }

// Heartbeat records b in the node set key (and its InstancesKey and
// OpaqueReadersKey) and returns how many nodes beat within b.TTL, how many
// of them (or of their processes) cannot read dialog tokens in opaque text,
// and which other processes beat as b.Node.
func Heartbeat(ctx context.Context, c redis.Scripter, key string, b Beat) (BeatReply, error) {
	if b.Node == "" || b.TTL < time.Millisecond {
		return BeatReply{}, fmt.Errorf("%w: heartbeat needs a node id and a ttl >= 1ms", ErrArgs)
	}
	v, err := heartbeatScript.Run(ctx, c, []string{key, InstancesKey(key), OpaqueReadersKey(key)},
		b.Node, b.TTL.Milliseconds(), b.Instance, b.Since).Result()
	if err != nil {
		return BeatReply{}, fmt.Errorf("lua: run heartbeat.lua for %q: %w", key, err)
	}
	return DecodeHeartbeat(v)
}

// LeaveHeartbeat takes b's process out of the node set key's InstancesKey
// and OpaqueReadersKey, as it stops, and b.Node out of key unless another
// process of it beat within b.TTL (a duplicate still running): a process
// restarted under b.Node is then not counted beside its predecessor, nor
// its node id, left without a reader, taken for an older release's, until
// the predecessor's last beat ages out. Without b.Instance it does nothing.
func LeaveHeartbeat(ctx context.Context, c redis.Scripter, key string, b Beat) error {
	if b.Node == "" || b.TTL < time.Millisecond {
		return fmt.Errorf("%w: heartbeat leave needs a node id and a ttl >= 1ms", ErrArgs)
	}
	if b.Instance == "" {
		return nil
	}
	if err := heartbeatScript.Run(ctx, c, []string{key, InstancesKey(key), OpaqueReadersKey(key)},
		b.Node, b.TTL.Milliseconds(), b.Instance, 0, "leave").Err(); err != nil {
		return fmt.Errorf("lua: run heartbeat.lua (leave) for %q: %w", key, err)
	}
	return nil
}

// DecodeHeartbeat decodes heartbeat.lua's reply.
func DecodeHeartbeat(v any) (BeatReply, error) {
	a, ok := v.([]any)
	if !ok || len(a) < 3 {
		return BeatReply{}, fmt.Errorf("%w: heartbeat: want an array {live, now, older, other...}, got %T %v", ErrReply, v, v)
	}
	live, ok1 := a[0].(int64)
	now, ok2 := a[1].(int64)
	older, ok3 := a[2].(int64)
	if !ok1 || !ok2 || !ok3 || live < 1 || now < 0 || older < 0 || older >= live {
		return BeatReply{}, fmt.Errorf("%w: heartbeat: want a positive live count, a time and fewer older nodes, got %v %v %v", ErrReply, a[0], a[1], a[2])
	}
	r := BeatReply{Live: int(live), Now: now, Older: int(older)}
	for _, o := range a[3:] {
		s, ok := o.(string)
		if !ok || s == "" {
			return BeatReply{}, fmt.Errorf("%w: heartbeat: want instance ids, got %T %v", ErrReply, o, o)
		}
		r.Others = append(r.Others, s)
	}
	return r, nil
}

// Heartbeater adapts a Redis client to store.Beater for one process. It
// remembers the Redis time of its first beat (see Beat.Since), so use one
// Heartbeater per process and instance, by pointer. It is safe for
// concurrent use.
type Heartbeater struct {
	Client redis.Scripter
	// Key is the node set, e.g. Key(prefix, "nodes", "all").
	Key string
	// Instance identifies this process (see Beat.Instance); empty turns
	// the search for duplicates off.
	Instance string

	since atomic.Int64
}

// Beat implements store.Beater: it returns the live nodes, the older ones
// among them and the instance ids of other processes beating under node.
func (h *Heartbeater) Beat(ctx context.Context, node string, ttl time.Duration) (BeatReply, error) {
	r, err := Heartbeat(ctx, h.Client, h.Key, Beat{Node: node, Instance: h.Instance, TTL: ttl, Since: h.since.Load()})
	if err != nil {
		return BeatReply{}, err
	}
	h.since.CompareAndSwap(0, r.Now)
	return r, nil
}

// Leave implements store.Leaver: it takes this process out of the node
// sets (LeaveHeartbeat) as it stops.
func (h *Heartbeater) Leave(ctx context.Context, node string, ttl time.Duration) error {
	return LeaveHeartbeat(ctx, h.Client, h.Key, Beat{Node: node, Instance: h.Instance, TTL: ttl})
}
