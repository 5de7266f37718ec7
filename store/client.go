package store

import (
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cpsguard/cpsguard/config"
)

// NewClient builds the go-redis client for cfg: standalone for one address,
// Cluster for several, Sentinel when MasterName is set (Addrs are then the
// sentinels). Every socket operation is bounded by cfg.Timeout and context
// deadlines reach the socket (ContextTimeoutEnabled), so no SIP call waits
// longer than the timeout for Redis.
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
		TLSConfig:             tc,
		Addrs:                 cfg.Addrs,
		MasterName:            cfg.MasterName,
		Username:              cfg.Username,
		Password:              cfg.Password,
		SentinelUsername:      cfg.Username,
		SentinelPassword:      cfg.Password,
		DB:                    cfg.DB,
		ClientName:            "cpsguard",
		DialTimeout:           max(timeout, 250*time.Millisecond),
		ReadTimeout:           timeout,
		WriteTimeout:          timeout,
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
