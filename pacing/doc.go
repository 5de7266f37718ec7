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
// Pacer.Acquire owns "wait until I may send", like x/time/rate's WaitN: it
// reserves the carrier's slot within max_wait, waits for it, takes the next
// slot after a late wake (three times at most), then passes the node's send
// gate, and either lets the call go or gives the slot back. The send gate
// is this node's own, in memory, one per Pacer: it holds a send until this
// node's last sends of each GateKey (the carrier, the call's peer and
// customer) leave room in the key's rolling window (admission.LimitFor of
// its cps, less half of admission.WindowGuard), counted from when they
// really left (Ticket.Sent), so a timer woken late never puts limit+1 calls
// into one second. It only delays, never past max_wait. While the store
// is Careful (Redis restarted empty, or came back from the fallback: the
// pool's schedule is lost), the gate holds each key to this node's share
// of its limit for the carrier's max_wait and one window; and the Pacer,
// which keeps the slots its calls wait for, puts them back into the
// schedule in use (a Rebooker store) before its next call reserves
// (rebook.go). A Pacer reads and
// waits on a Clock (SystemClock, or a fake one in tests). Pacing keeps no
// metrics: a Tracer (Trace, a struct of funcs, is one) tells the caller of
// each reservation, wait and late wake.
//
// A caller may make Acquire's first reservation ahead of it (FirstAsk says
// what it would be; store.Failover.AdmitReserve makes it with the call's
// admission, in one Redis round trip) and hand the reply to Acquire in
// Carrier.First: Acquire then takes it as its own first reservation's
// reply (same waits, late wakes, bookings, pauses, and MaxWait counted
// from when it was asked), and gives back one it cannot use (another
// call's, a priority call's, a carrier this node knows is paused).
//
// A priority call (its context marked by WithPriority: an emergency number
// or an allowed Resource-Priority claim) goes to the front: Acquire sends
// it at once, past the send gate (which records the send), and reserves
// the carrier's next free slot as its place whatever MaxWait (up to
// PriorityHorizon), so the calls already waiting keep their slots and each
// call after it waits one interval more. A carrier may see its cps plus
// the priority calls in any one second, and no more than its cps over any
// span longer than its queue. A paused carrier is skipped as for any call.
//
// A carrier may be shared fairly among its callers (Share: a customer or a
// peer, with a weight; Carrier.Share per call). While it is the
// bottleneck, each share waiting for it gets at least its weight's part of
// its slots (weight over the sum of the weights waiting), and a part one
// leaves idle goes to the others; the spacing, and so the cps in every
// rolling second, holds as without shares. The stores keep, beside the
// slot set, each share's next turn, its turns a period = interval × sum /
// weight apart (start-time fair queueing on real time). A call whose share
// is within its part (its next turn at most one period ahead) takes the
// first free slot from now at once; a call beyond it takes a slot free
// right now if any (work-conserving, uncharged), else it gets a booking of
// its share's turn (Slot.Booked) and reserves again then, when it takes
// the first free slot from its turn. Slots are taken only close to now, so
// a call within its share finds one within about an interval even when
// another share has booked the whole max_wait; a turn whose slot went to
// calls within their share slips, with the share's later ones. A share
// stops counting as waiting one period after its last turn; a call's
// record lives max_wait + 2 s, so that a Release (of a booking or of a
// slot) gives the share its turn back, once. Redis keeps it in pace.lua
// (two keys beside the slot set, with TTLs); LocalSlots decides the same
// in the same integer microseconds. Acquire follows bookings. The
// Reserve path without a share is unchanged.
//
// An adaptive carrier's effective rate is kept by the same stores (Adapt,
// AIMD): an overload answer multiplies it by a factor below 1, at most once
// per hold, never below a floor, and it climbs back additively towards the
// carrier's cps on the store's clock (rate.lua on Redis, pool-wide; the
// same integer arithmetic in LocalSlots). The caller paces at that rate.
// A decrease removes the slots still in the future; a call holding one
// takes a slot again at the new rate before it sends (Acquire).
// A carrier's limit lowered by a reload or a live override does the same
// for this process's slots (Respace, respace.lua), found by the prefix
// every member it makes carries (MemberOf): the slots still in the future
// are removed — its own only, since another node's calls would not know
// and would send on theirs — and its calls take one again at the new
// rate; from then on every call of the node reserves at it and passes
// the send gate at the new limit, whatever limit it started with.
//
// A carrier's Retry-After pause is kept by the same stores too (Pause,
// pause.lua on Redis): while its span runs every reservation is refused at
// once (Slot.Paused), so calls go elsewhere instead of queueing behind it,
// and the slots already reserved are removed; after the span the first
// call to get a slot is its half-open probe (Slot.Probe) and every other
// is refused until ProbeDone (answered: the pause ends; not: the next call
// tries), a claim that expires after max_wait + ProbeClaim, a new pause, a
// good OPTIONS probe (OpenPause) or an operator (Unpause). The stores also
// keep the pool's evidence of a carrier's overload answers (Evidence):
// which peers called it and which of them it refused lately. A Pacer
// remembers what it learns of each carrier's pause and last decrease from
// every reply (its own Pause, Adapt and Respace at once, the pool's
// through Paused and Adapt): Acquire skips a carrier it knows paused without a store
// call, and checks a slot again just before the send, giving back one
// reserved before a pause (unless it is the probe) and taking again one
// spaced for a rate decreased since.
//
// Failure: a full queue is a Slot (or a Ticket) with OK false, never an
// error (a share's turn beyond max_wait is a full queue too); so are a paused carrier, a call missing its slots by waking late
// and a send the gate would hold past max_wait. Acquire returns ctx.Err() when the caller's
// context ends first. Any other error means the store failed and nothing
// was reserved that the caller knows of; the caller applies the failure
// policy. A slot whose release failed only delays later calls until its
// time has passed.
//
// Every type here is safe for concurrent use.
package pacing
