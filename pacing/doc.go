// Package pacing owns outbound pacing: calls go to a carrier no faster than
// its CPS, each taking the carrier's next free send slot (a leaky bucket) and
// waiting for it.
//
// A SlotStore reserves slots atomically: slot = max(now, last + interval);
// when the wait would exceed the caller's maximum, nothing is reserved.
// RedisSlots shares the slots of a pool through Redis (pace.lua on Redis's
// clock; with RedisOptions.Pipeline, concurrent reservations share round
// trips through a lua.Pipeliner the caller owns and closes); LocalSlots
// keeps them in process on the local monotonic clock. The
// Pacer on top reserves with Interval(cps) (which includes SpacingGuard), never
// reserves a slot the caller cannot wait for, waits cancellably, and releases
// the slot of a cancelled wait. A send may go out up to MaxLate after its
// slot; a caller that wakes later gives the slot back and takes the next.
//
// An adaptive carrier's effective rate is kept by the same stores (Adapt,
// AIMD): an overload answer multiplies it by a factor below 1, at most once
// per hold, never below a floor, and it climbs back additively towards the
// carrier's cps on the store's clock (rate.lua on Redis, pool-wide; the
// same integer arithmetic in LocalSlots). The caller paces at that rate.
//
// Failure: a full queue is a Slot with OK false, never an error. An error
// means the store failed and nothing was reserved that the caller knows of;
// the caller applies the failure policy. A slot whose release failed only
// delays later calls until its time has passed.
//
// Every type here is safe for concurrent use.
package pacing
