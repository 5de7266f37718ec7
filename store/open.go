package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cpsguard/cpsguard/admission"
	"github.com/cpsguard/cpsguard/calls"
	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/panics"
	"github.com/cpsguard/cpsguard/lua"
	"github.com/cpsguard/cpsguard/pacing"
	"github.com/cpsguard/cpsguard/policy"
)

// OpenOptions are the non-config inputs of Open.
type OpenOptions struct {
	// Observe is told of every Redis script run (metrics).
	Observe func(script string, d time.Duration, err error)
	// OnMode is told of every switch between ModeRedis and ModeFallback.
	OnMode func(mode string)
	// OnDuplicateNodeID is told when another process starts (true) or
	// stops (false) beating in Redis under this node's node_id.
	OnDuplicateNodeID func(duplicate bool)
	// Instance identifies this process in the heartbeat; empty means a
	// random one (NewInstanceID).
	Instance string
	// HeartbeatInterval defaults to 1 s.
	HeartbeatInterval time.Duration
	// ProbeInterval defaults to 250 ms.
	ProbeInterval time.Duration
	Logger        *slog.Logger
	// Panics logs and counts panics recovered in Redis calls and in the
	// store's goroutines (cpsguard_panics_total); nil logs only.
	Panics *panics.Reporter
}

// Stores is the store a node decides on, built from store.* of the config.
type Stores struct {
	*Failover
	// Calls holds the max_calls places (CallsFailover).
	Calls     calls.Store
	client    redis.UniversalClient
	pipeline  *lua.Pipeliner
	heartbeat *Heartbeat
	timeout   time.Duration
}

// Open builds the stores for cfg: the in-process stores alone when
// cfg.Store.Redis is nil, else the Redis stores guarded by a Failover with the
// in-process stores behind them. It loads the scripts when Redis answers;
// when Redis does not answer the node still starts, in fallback (under
// on_error reject it refuses calls, as the operator asked), and the probe
// brings it back to Redis.
func Open(ctx context.Context, cfg *config.Config, o OpenOptions) (*Stores, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	local := admission.NewLocalStore(nil)
	localSlots := pacing.NewLocalSlots(nil)
	rc := cfg.Store.Redis
	if rc == nil {
		f := NewFailover(Options{Local: local, LocalSlots: localSlots, Logger: o.Logger})
		return &Stores{Failover: f, Calls: NewCallsFailover(f, nil, calls.NewLocalStore(nil))}, nil
	}
	if len(rc.Addrs) == 0 {
		return nil, fmt.Errorf("store: store.redis.addrs is empty")
	}
	client, err := NewClient(rc)
	if err != nil {
		return nil, err
	}
	// A panic in go-redis (a hostile reply) is a failed command. A
	// Cluster runs commands on a client per node, which does not inherit
	// the cluster client's hooks, some in go-redis's own goroutines (h62).
	hook := panicHook{r: o.Panics}
	if cc, ok := client.(*redis.ClusterClient); ok {
		cc.OnNewNode(func(n *redis.Client) { n.AddHook(hook) })
	}
	client.AddHook(hook)
	// One pipeliner for both Redis stores: admissions and pacing
	// reservations of concurrent calls share round trips.
	s := &Stores{client: client, timeout: rc.Timeout}
	pipe := lua.NewPipeliner(client, lua.PipelineOptions{Panics: o.Panics,
		// A Redis that lost its scripts may have lost the last window's
		// calls too (careful.go). The Failover is set below, before any
		// script runs.
		OnNoScript: func() { s.Failover.noScript() }})
	s.pipeline = pipe
	observe := o.Observe
	if o.Instance == "" {
		o.Instance = NewInstanceID()
	}
	slow := &slowWatch{timeout: rc.Timeout, log: o.Logger}
	observeBeat := func(script string, d time.Duration, err error) {
		slow.beat(d, err)
		if observe != nil {
			observe(script, d, err)
		}
	}
	hb := NewHeartbeat(&lua.Heartbeater{Client: client, Key: policy.NodesKey(cfg.Store.KeyPrefix), Instance: o.Instance},
		HeartbeatOptions{
			Node:     cfg.NodeID,
			Interval: o.HeartbeatInterval,
			MinNodes: rc.ExpectedNodes,
			// A beat Redis answered is Redis answering, as a call's is: on
			// a node without calls, one slow beat must not count as an
			// outage.
			OnBeat:      func() { s.ok() },
			Observe:     observeBeat,
			OnError:     func(err error) { s.fail("heartbeat", err) },
			OnDuplicate: o.OnDuplicateNodeID,
			Logger:      o.Logger,
			Panics:      o.Panics,
		})
	s.heartbeat = hb
	s.Failover = NewFailover(Options{
		Redis:         admission.NewRedisStore(client, admission.RedisOptions{Timeout: rc.Timeout, Observe: observe, Pipeline: pipe}),
		RedisSlots:    pacing.NewRedisSlots(client, pacing.RedisOptions{Timeout: rc.Timeout, Observe: observe, Pipeline: pipe}),
		Local:         local,
		LocalSlots:    localSlots,
		Probe:         pinger{client: client},
		Nodes:         hb,
		Policy:        cfg.Store.OnError,
		ProbeInterval: o.ProbeInterval,
		Timeout:       rc.Timeout,
		OnMode:        o.OnMode,
		Logger:        o.Logger,
		Panics:        o.Panics,
	})
	s.Calls = NewCallsFailover(s.Failover,
		calls.NewRedisStore(client, calls.RedisOptions{Timeout: rc.Timeout, Observe: observe, Pipeline: pipe}),
		calls.NewLocalStore(nil))
	lctx, cancel := context.WithTimeout(ctx, max(time.Second, rc.Timeout))
	defer cancel()
	if err := lua.Load(lctx, client); err != nil {
		// fail logs the switch, once (op "start").
		s.fail("start", err)
	} else if err := hb.Beat(ctx, max(time.Second, rc.Timeout)); err != nil {
		o.Logger.Warn("redis heartbeat failed at start", "error", err)
	}
	return s, nil
}

// Run keeps the heartbeat and the fallback probe going until ctx is done,
// and returns once both have stopped (the heartbeat's leave included, so
// that Close comes after it).
func (s *Stores) Run(ctx context.Context) {
	var wg sync.WaitGroup
	if s.heartbeat != nil {
		wg.Go(func() { s.heartbeat.Run(ctx, BackgroundTimeout(s.timeout)) })
	}
	s.Failover.Run(ctx)
	wg.Wait()
}

// BackgroundTimeout is how long a Redis call that no SIP call waits for
// (the heartbeat, the probe, the limit overrides' reads and writes, the
// pool's list of live calls, the exchange of ended dialogs, the carriers'
// service marks) may take, given store.redis.timeout: not the call's
// bound but the span without an answer that makes a timeout an outage
// (Options.Quiet: 5 × the timeout, at least 250 ms). With the call's own bound, one heartbeat that needed
// a new connection (a dial and a handshake before the script) switched an
// idle node to its fallback at a few milliseconds of round trip, and the
// overrides' reads failed and recovered every second (h60).
func BackgroundTimeout(timeout time.Duration) time.Duration {
	return max(5*timeout, 250*time.Millisecond)
}

// RedisClient is the client of the configured Redis, for the stores of
// other concerns that live in the same Redis (limit overrides); nil without
// Redis. Close closes it.
func (s *Stores) RedisClient() redis.UniversalClient { return s.client }

// LiveNodes is the pool size last seen in Redis (1 without Redis).
func (s *Stores) LiveNodes() int { return s.heartbeat.Live() }

// OpaqueTokens reports whether the pool's live nodes all read dialog
// tokens in opaque text (Heartbeat.OpaqueTokens; true without Redis).
func (s *Stores) OpaqueTokens() bool { return s.heartbeat.OpaqueTokens() }

// DuplicateNodeID reports whether another process beat in Redis under this
// node's node_id at the last heartbeat (false without Redis).
func (s *Stores) DuplicateNodeID() bool { return s.heartbeat.Duplicate() }

// NewInstanceID returns a random id for one process (16 hex digits), which
// tells two processes with one node_id apart in the heartbeat.
func NewInstanceID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// Close stops the script pipeliner (calls still queued fail with
// lua.ErrClosed) and closes the Redis client, if any.
func (s *Stores) Close() error {
	if s.client == nil {
		return nil
	}
	_ = s.pipeline.Close()
	return s.client.Close()
}

// pinger adapts a go-redis client to Pinger, the fallback's probe of
// Redis: PING, then the scripts (lua.Load: SCRIPT EXISTS, and SCRIPT LOAD
// for those a restarted Redis lost; EVALSHA would fall back to EVAL, but
// loading them here keeps that off the call path), within the probe's
// bound (Failover's Quiet), as are its reads (the client's read timeout
// is BackgroundTimeout).
type pinger struct{ client redis.UniversalClient }

func (p pinger) Ping(ctx context.Context) (err error) {
	defer func() {
		if cc, ok := p.client.(*redis.ClusterClient); ok && err != nil {
			// A master died and a replica took over: go-redis learns the
			// new map only at its next reload (h49: the node stayed on the
			// fallback ~10 s after the new master served), so ask for one.
			cc.ReloadState(ctx)
		}
	}()
	if err := p.client.Ping(ctx).Err(); err != nil {
		return err
	}
	return lua.Load(ctx, p.client)
}
