package pacing

import (
	"context"
	"time"
)

// SpacingGuard is the fraction by which slots are spaced wider than 1/cps. The proxy
// sends a call a little after its slot (timer and scheduling jitter); spacing
// slots 1 % wider means a send may be up to 10 ms late before the carrier could
// see more than cps calls in one rolling second.
const SpacingGuard = 0.01

// MaxLate is how late after its slot a call may be sent: SpacingGuard of a
// second (10 ms). Slots are spaced SpacingGuard wider than 1/cps, so cps slots
// span 1 s + MaxLate and the first of them may go out that late before a
// carrier could count cps + 1 calls in one rolling second; a caller that
// wakes later must give the slot back and take the next.
const MaxLate = time.Duration(SpacingGuard * float64(time.Second))

// Interval is the spacing of send slots for a carrier allowed cps calls per
// second, including SpacingGuard.
func Interval(cps float64) time.Duration {
	if cps <= 0 {
		return 0
	}
	return time.Duration(float64(time.Second) / cps * (1 + SpacingGuard))
}

// Carrier is what pacing needs to know of one carrier.
type Carrier struct {
	// Key names the carrier's slot set in the store, e.g. "cpsguard:{carrier:a}".
	Key string
	// CPS is the carrier's calls-per-second limit (> 0, may be fractional).
	CPS float64
	// MaxWait is the longest a call may wait for a slot of this carrier.
	MaxWait time.Duration
	// Share is the share of the carrier's slots the call asking draws on
	// (the zero Share: none, first come, first served).
	Share Share
	// First, when set, is the call's first reservation, made ahead of
	// Acquire (see First); Acquire owns it from then on.
	First *First
}

// Slot is the outcome of one reservation. A full queue is a Slot with OK
// false, never an error.
type Slot struct {
	// OK reports whether a slot was reserved.
	OK bool
	// Wait is how long the caller must wait before sending (the wait it would
	// have had when OK is false).
	Wait time.Duration
	// At is the store's clock when the slot was decided.
	At time.Time
	// Key and Member identify the reservation for Release.
	Key, Member string
	// Reserved is the local time the reply arrived; the send is due at
	// Reserved + Wait.
	Reserved time.Time
	// Paused reports a refusal because the carrier is paused (Pause), or
	// half-open with its probe taken by another call: OK is false and Wait
	// is what is left of the pause's span.
	Paused bool
	// Probe reports a slot granted as the half-open probe of a pause: the
	// one call that tries the carrier after the span. Its outcome ends the
	// pause or frees the claim (ProbeDone); a Release frees it too.
	Probe bool
	// Booked reports a booking rather than a slot (OK is true): the call
	// has its share's turn at Due, and must then Reserve again with the
	// same member to take the slot itself (which may answer with another
	// booking, a little later, when the slot at its turn was taken
	// meanwhile). A Release gives a booking back like a slot.
	Booked bool
}

// Due is the local time at which the reserved call may be sent.
func (s Slot) Due() time.Time { return s.Reserved.Add(s.Wait) }

// ProbeClaim is how long past a half-open probe's max_wait its claim
// lasts: an INVITE transaction with no answer at all ends by then (RFC 3261
// Timer B), so a probe whose node died frees the carrier for the next one.
const ProbeClaim = 32 * time.Second

// SlotStore reserves and releases send slots atomically, and keeps what
// the pool shares of each carrier beside its slot set: its pause, its
// adaptive rate, the evidence of its overload answers and the state of its
// fair shares.
//
// Reserve without a share takes slot = max(now, last + interval); when
// slot - now > maxWait it reserves nothing and reports OK false with the
// wait it would have been. With a share it shares the carrier fairly (see
// the package doc): a call within its share takes the first free slot from
// now, one beyond it a booking of its share's next turn (Slot.Booked), to
// be turned into a slot by reserving again at that turn. Every slot is
// at least interval from every other, whichever way it was taken.
// A paused carrier gets no slot at all (Slot.Paused, at once, however long
// maxWait); once the pause's span is over, the first call to get a slot is
// its half-open probe (Slot.Probe, a claim that lasts maxWait + ProbeClaim)
// and every other is refused as paused until ProbeDone. An error means the
// store failed and nothing was reserved that the caller knows of.
type SlotStore interface {
	Reserve(ctx context.Context, key, member string, share Share, interval, maxWait time.Duration) (Slot, error)
	// Release removes a reservation (slot or booking) that will not be
	// used (call cancelled or rerouted before it was sent); a share's
	// reservation gives its share the turn back. Releasing an unknown
	// member is a no-op.
	Release(ctx context.Context, key, member string) error
	// Pause grants no slot of key for span from now (the carrier asked the
	// pool to wait: 503 with Retry-After); every node's next Reserve sees
	// it. A span ending later replaces the pause in force, a shorter one
	// changes nothing. The slots still in the future are removed: their
	// holders must not send (see Acquire).
	Pause(ctx context.Context, key string, span time.Duration, reason string) (Pause, error)
	// Paused reads key's pause (Pause.Paused false: none).
	Paused(ctx context.Context, key string) (Pause, error)
	// ProbeDone ends the half-open probe of member: ok (the carrier
	// answered it) ends the pause, else the claim is freed for the next
	// call. Nothing changes unless member holds the claim.
	ProbeDone(ctx context.Context, key, member string, ok bool) (Pause, error)
	// OpenPause ends the span of a pause at least minAge old now, so the
	// carrier is half-open (its OPTIONS probe was answered).
	OpenPause(ctx context.Context, key string, minAge time.Duration) (Pause, error)
	// Unpause ends key's pause (an operator); the Pause returned is the
	// one that ended, Changed false when there was none.
	Unpause(ctx context.Context, key string) (Pause, error)
	// Evidence records that peer called the carrier whose slot set is key
	// (overload: and got an overload answer) and returns how many peers
	// did within w's windows, pool-wide.
	Evidence(ctx context.Context, key, peer string, overload bool, w EvidenceWindows) (Evidence, error)
	// Adapt returns the effective rate of an adaptive carrier whose slot
	// set is key, first decreasing it when overload (AIMD, see AIMD); a
	// decrease removes the slots still in the future (their holders take
	// one again at the new rate, see Acquire).
	Adapt(ctx context.Context, key string, a AIMD, overload bool) (Rate, error)
	// Queue reports the state of a carrier's slots (see QueueState).
	Queue(ctx context.Context, key string, interval time.Duration) (QueueState, error)
	// Respace removes the slots still in the future of the carrier whose
	// slot set is key whose members start with prefix (one process's,
	// Pacer.MemberOf; never empty): the carrier's limit was lowered on
	// this node and they were spaced for the old one (their holders take
	// one again at the new interval, see Acquire). Slots due already, and
	// every other member's, stay. It returns the store's time of the
	// removal.
	Respace(ctx context.Context, key, prefix string) (time.Time, error)
}

// Pause is a carrier's Retry-After pause, pool-wide: while its span runs
// no call gets a slot; after it the carrier is half-open (one probe call,
// see SlotStore.Reserve) until that call is answered (the pause ends) or
// the carrier is paused again.
type Pause struct {
	// Paused reports a pause in force (span running, or half-open). For
	// an op that ended one (ProbeDone ok, Unpause), the fields below
	// describe the pause that ended.
	Paused bool
	// Left is what is left of the span (0 once half-open); Age is how long
	// ago the pause began. Both are measured on the store's clock at the
	// operation.
	Left, Age time.Duration
	// Reason says why the carrier was paused.
	Reason string
	// Probing reports a live half-open probe claim.
	Probing bool
	// Changed reports that the operation changed the pause.
	Changed bool
	// Until and Since are the end of the span and the start of the pause on
	// the Pacer's clock (set by the Pacer's methods; a SlotStore leaves
	// them zero).
	Until, Since time.Time
}

// HalfOpen reports a pause whose span is over: one probe call may try the
// carrier.
func (p Pause) HalfOpen() bool { return p.Paused && p.Left <= 0 }

// EvidenceWindows are the windows of SlotStore.Evidence.
type EvidenceWindows struct {
	// Callers is how long a peer counts as a caller of the carrier.
	Callers time.Duration
	// Overload is how recent an overload answer must be to count.
	Overload time.Duration
}

// Evidence is what the pool saw of one carrier's overload answers lately.
type Evidence struct {
	// Callers is the number of peers that called the carrier within the
	// callers window, pool-wide (the one just recorded included).
	Callers int
	// Overloaded is the number of peers it gave an overload answer within
	// the overload window.
	Overloaded int
}

// QueueState is what an operator sees of one carrier's slots.
type QueueState struct {
	// Queued is the number of reservations still in the future: calls
	// waiting for their slot or for their share's turn (bookings).
	Queued int
	// Sent is the number of slots in the last second: the carrier's current
	// calls per second as paced by the whole pool.
	Sent int
	// Wait is the least wait of a call reserving now.
	Wait time.Duration
}
