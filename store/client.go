package store

import (
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cpsguard/cpsguard/config"
)

// NewClient builds the go-redis client for cfg: standalone for one address,
// Cluster for several, Sentinel when MasterName is set (Addrs are then the
// sentinels). Every socket operation is bounded by cfg.Timeout and context
// deadlines reach the socket (ContextTimeoutEnabled), so no SIP call waits
// longer than the timeout for Redis.
func NewClient(cfg *config.Redis) redis.UniversalClient {
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = 50 * time.Millisecond
	}
	return redis.NewUniversalClient(&redis.UniversalOptions{
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
	})
}
