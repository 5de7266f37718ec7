package store

import (
	"log/slog"
	"sync"
	"time"
)

// slowWatch warns when Redis's round trips come close to
// store.redis.timeout, from the heartbeat's (one script, one round trip
// on a warm connection): a call whose round trip runs past the timeout
// is decided on the fallback and not counted in Redis, so a timeout
// close to the round trip lets a steady trickle of calls past the pool's
// limits (h60: 31 a second at a peer's 30 with 20-40 ms of round trip at
// the default 50 ms). One slow beat is no evidence (it may have dialled
// and set up a connection): it takes slowBeats in a row over half the
// timeout, and the warning comes at most once per slowWarnEvery.
type slowWatch struct {
	timeout time.Duration
	log     *slog.Logger

	mu     sync.Mutex
	run    int
	warned time.Time
}

const (
	slowBeats     = 3
	slowWarnEvery = 10 * time.Minute
)

// beat records one heartbeat's round trip (err: it failed, and says
// nothing of the round trip).
func (w *slowWatch) beat(d time.Duration, err error) {
	if err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if 2*d <= w.timeout {
		w.run = 0
		return
	}
	w.run++
	if now := time.Now(); w.run >= slowBeats && now.Sub(w.warned) >= slowWarnEvery {
		w.warned = now
		w.log.Warn("Redis's round trip is over half of store.redis.timeout: calls that wait past it are decided on the fallback and not counted in Redis, so the pool's limits leak; raise store.redis.timeout to three round trips or more (docs/operations.md)",
			"round_trip", d.Round(time.Millisecond).String(), "timeout", w.timeout.String(), "beats_in_a_row", w.run)
	}
}
