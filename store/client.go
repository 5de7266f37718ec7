package store

import (
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/cpsguard/cpsguard/config"
)

// NewClient builds the go-redis client for cfg: standalone for one address,
// Cluster for several, Sentinel when MasterName is set (Addrs are then the
// sentinels). Context deadlines reach the socket (ContextTimeoutEnabled):
// a call's round trip is bounded by cfg.Timeout through its context
// (lua.WithTimeout), so no SIP call waits longer than the timeout for a
// Redis round trip; what no call waits for is bounded by
// BackgroundTimeout.
// With store.redis.tls enabled every connection (to sentinels too) is TLS;
// the files were checked when the configuration was validated, so an error
// here means they changed since.
func NewClient(cfg *config.Redis) (redis.UniversalClient, error) {
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = 50 * time.Millisecond
	}
	tc, err := cfg.TLS.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("store: store.redis.tls: %w", err)
	}
	return redis.NewUniversalClient(&redis.UniversalOptions{
		TLSConfig:        tc,
		Addrs:            cfg.Addrs,
		MasterName:       cfg.MasterName,
		Username:         cfg.Username,
		Password:         cfg.Password,
		SentinelUsername: cfg.Username,
		SentinelPassword: cfg.Password,
		DB:               cfg.DB,
		// A new connection is set up inside the first command's bound
		// (go-redis), so every round trip of its handshake counts against
		// store.redis.timeout: HELLO alone (and SELECT for a db above 0),
		// not HELLO, CLIENT SETNAME, CLIENT MAINT_NOTIFICATIONS and CLIENT
		// SETINFO (h60: with those, a Redis 20 ms away failed every new
		// connection at the default 50 ms, the nodes fell back one by one,
		// and a pool half on Redis, half on its fallback admitted 1.5
		// times its limits). So no client name (CLIENT LIST shows the
		// nodes by address), no library identity, no maintenance
		// notifications (a feature of Redis Enterprise and Cloud the
		// failover does not use).
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		DialTimeout:              max(timeout, 250*time.Millisecond),
		// Every call's command carries its own deadline (lua.WithTimeout:
		// the round trip within store.redis.timeout from its send), so the
		// sockets' own bounds only cap what no call waits for (the
		// heartbeat, the probe, the background reads), which may wait
		// BackgroundTimeout: with the call's timeout here each of their
		// reads was cut at it whatever their context allowed (go-redis
		// takes the sooner), and one slow reply switched an idle node to
		// its fallback (h61).
		ReadTimeout:           BackgroundTimeout(timeout),
		WriteTimeout:          BackgroundTimeout(timeout),
		ContextTimeoutEnabled: true,
		// A retry would double the time a call waits for a failing Redis;
		// the failover store moves to the fallback instead.
		MaxRetries:   -1,
		PoolTimeout:  timeout,
		MinIdleConns: 2,
		// One connection per in-flight script keeps latency flat under load.
		PoolSize: 64,
		// Nor is a failed dial tried again within a call's bound: go-redis's
		// five tries 100 ms apart outlast it, and after a Cluster master
		// died the probe kept dialling the dead address first, each time,
		// for ~7 s after a replica had taken over (h50). The probe and the
		// next call dial again.
		DialerRetries: 1,
	}), nil
}
