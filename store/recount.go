package store

import (
	"context"
	"time"

	"github.com/cpsguard/cpsguard/admission"
	"github.com/cpsguard/cpsguard/pacing"
)

// A call decided on the fallback while the pool decides on Redis (a
// timeout Redis was forgiven for: it answered other calls lately) is not
// counted in Redis, which then lets the pool's whole limit through beside
// the calls so decided (h61: 60 a second at a peer's 30 through a 600 ms
// spike shorter than a switch). Holding the node to its share for a
// window instead refused calls the pool had room for on every slow reply
// of a busy node (h65). So the call is counted in Redis afterwards: its
// admission (every bucket counting it whatever its level, as a call no
// limit refuses) and its carrier slot (put back at its due time, as
// rebook.lua does), as soon as Redis answers, within the window it
// matters for.

// recount is one decision Redis has not counted.
type recount struct {
	member  string
	buckets []admission.Bucket // admission: counted whatever the level
	key     string             // or a carrier slot of key
	slot    pacing.Waiting
	until   time.Time // past it, counting it changes nothing
}

// recountQueue bounds the decisions waiting to be counted: past it (a
// Redis slow for long on a busy node) they are dropped, as before.
const recountQueue = 4096

// recountRetry spaces the tries of one decision while Redis does not answer.
const recountRetry = 50 * time.Millisecond

// recountAdmission queues the admission d of member, which the fallback
// made while Redis is in use, to be counted in Redis (Run).
func (f *Failover) recountAdmission(member string, buckets []admission.Bucket, d admission.Decision) {
	if !d.Admit || d.Duplicate || !f.redisInUse() || f.recounts == nil {
		return
	}
	out := make([]admission.Bucket, len(buckets))
	var span time.Duration
	for i, b := range buckets {
		if b.Over == admission.OverRefuse {
			b.Over = admission.OverCount
		}
		out[i] = b
		span = max(span, b.Window)
	}
	f.queueRecount(recount{member: member, buckets: out, until: time.Now().Add(min(span, carefulMaxWindow))})
}

// recountSlot queues a carrier slot the local slots gave while Redis is
// in use, to be put into Redis's schedule at its due time (Run).
func (f *Failover) recountSlot(key string, s pacing.Slot, interval time.Duration) {
	if !s.OK || !f.redisInUse() || f.recounts == nil {
		return
	}
	due, keep := s.Due(), max(interval, time.Second) // pace.lua's keep
	f.queueRecount(recount{key: key, slot: pacing.Waiting{Member: s.Member, Due: due, Keep: keep}, until: due.Add(keep)})
}

func (f *Failover) queueRecount(r recount) {
	select {
	case f.recounts <- r:
	default:
		f.o.Logger.Debug("redis: a decision made while it did not answer is not counted in it (queue full)", "member", r.member, "slot_set", r.key)
	}
}

// runRecounts counts the queued decisions in Redis, one after another,
// each retried while Redis does not answer, until its span has passed or
// the node switched to its fallback (then careful.go's switch back covers
// it). It returns when ctx is done.
func (f *Failover) runRecounts(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-f.recounts:
			f.recountOne(ctx, r)
		}
	}
}

func (f *Failover) recountOne(ctx context.Context, r recount) {
	for time.Now().Before(r.until) && f.redisInUse() {
		cctx, cancel := context.WithTimeout(ctx, f.o.Quiet)
		var err error
		if r.key != "" {
			if rb, ok := f.o.RedisSlots.(slotRebooker); ok {
				err = rb.Rebook(cctx, r.key, []pacing.Waiting{r.slot})
			}
		} else {
			_, err = f.o.Redis.Admit(cctx, r.member, r.buckets)
		}
		cancel()
		if err == nil {
			f.ok()
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(recountRetry):
		}
	}
}
