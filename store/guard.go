package store

import (
	"context"
	"net"

	"github.com/redis/go-redis/v9"

	"github.com/cpsguard/cpsguard/internal/panics"
)

// panicHook turns a panic inside go-redis into the failing command's error.
// go-redis' reply reader trusts the lengths a server sends: a bulk reply
// announced as "$9223372036854775806" panics in makeslice, in whatever
// goroutine runs the command (a SIP handler, the script pipeliner, the
// heartbeat). Through this hook a hostile or broken Redis, or anything that
// answers on its address, is a store failure (the Failover falls back),
// never a crash. It wraps every command and pipeline of the client it is
// added to; on a Cluster, Open adds it to each node's client too.
type panicHook struct{ r *panics.Reporter }

var _ redis.Hook = panicHook{}

func (h panicHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (c net.Conn, err error) {
		defer h.r.Recover("store.redis.dial", func(e error) { c, err = nil, e })
		return next(ctx, network, addr)
	}
}

func (h panicHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) (err error) {
		defer h.r.Recover("store.redis", func(e error) {
			cmd.SetErr(e)
			err = e
		})
		return next(ctx, cmd)
	}
}

func (h panicHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) (err error) {
		defer h.r.Recover("store.redis", func(e error) {
			// Which replies were read before the panic is unknown: every
			// command of the pipeline fails (a store error, not a guess).
			for _, c := range cmds {
				c.SetErr(e)
			}
			err = e
		})
		return next(ctx, cmds)
	}
}
