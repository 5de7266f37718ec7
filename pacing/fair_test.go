package pacing

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// fairCall is one call of a fair-share scenario: it arrives at `at` (from
// the scenario's start) for share.
type fairCall struct {
	at     time.Duration
	member string
	share  Share
}

// fairOutcome is what became of one call.
type fairOutcome struct {
	call fairCall
	ok   bool
	// slot is the time of its slot on the store's clock (ok only).
	slot time.Time
	// wait is from its arrival to its slot (ok), as the caller saw it.
	wait time.Duration
	// rounds counts its reservations (the first, then one per booking).
	rounds int
}

// driveFair plays calls against b's store as Acquire would: each call
// reserves when it arrives and, while the answer is a booking, again when
// the booking is due, with what is left of maxWait. On the fake clock the
// scenario runs in exact steps; on Redis's clock it runs in real time (the
// store's decisions are then checked on its own clock, never against a
// duration measured here), and late is how late the driver handled its
// latest event: by then the store's clock had run on, and the slots of the
// lag went unused or to whoever came first. err reports a scenario that did
// not settle (every loop is bounded).
func driveFair(t *testing.T, b backend, key string, calls []fairCall, interval, maxWait time.Duration) (out []fairOutcome, late time.Duration, err error) {
	t.Helper()
	ctx := context.Background()
	start := time.Now()
	var elapsed time.Duration // the fake clock's, from the start
	now := func() time.Duration {
		if b.exact {
			return elapsed
		}
		return time.Since(start)
	}
	waitUntil := func(at time.Duration) {
		if b.exact {
			if at > elapsed {
				b.advance(at - elapsed)
				elapsed = at
			}
			return
		}
		if d := at - time.Since(start); d > 0 {
			time.Sleep(d)
		}
	}
	type event struct {
		due time.Duration
		i   int
	}
	out = make([]fairOutcome, len(calls))
	var queue []event
	for i, c := range calls {
		out[i].call = c
		queue = append(queue, event{c.at, i})
	}
	for steps := 0; len(queue) > 0; steps++ {
		if steps > 50*len(calls) {
			return out, late, fmt.Errorf("scenario did not settle in %d steps", steps)
		}
		slices.SortStableFunc(queue, func(a, b event) int { return cmp.Compare(a.due, b.due) })
		e := queue[0]
		queue = queue[1:]
		waitUntil(e.due)
		late = max(late, now()-e.due)
		o := &out[e.i]
		o.rounds++
		if o.rounds > 20 {
			return out, late, fmt.Errorf("%s: still booked after %d rounds", o.call.member, o.rounds)
		}
		left := max(maxWait-(now()-o.call.at), 0)
		s, err := b.store.Reserve(ctx, key, o.call.member, o.call.share, interval, left)
		if err != nil {
			t.Fatalf("Reserve(%s): %v", o.call.member, err)
		}
		if s.OK && !s.Booked && s.Wait > left {
			t.Fatalf("%s: slot %v ahead, beyond what is left of max_wait, %v", o.call.member, s.Wait, left)
		}
		switch {
		case !s.OK:
		case s.Booked:
			queue = append(queue, event{now() + s.Wait, e.i})
		default:
			o.ok, o.slot, o.wait = true, s.At.Add(s.Wait), now()+s.Wait-o.call.at
		}
	}
	return out, late, nil
}

// fairScale stretches the times of a scenario played on Redis's clock,
// which cannot be stopped. The driver is one goroutine making a round trip
// per decision; under -race on a loaded machine it fell far behind a 10 ms
// interval (a burst of 180 calls took up to half of a 1 s max_wait to
// reserve, bookings came back after their turns, whose slots were gone:
// TestFairWeightedSplit granted a 23, b 58 of the 100 slots, or a call was
// booked again at every late return, 21 rounds; 6 failures in 8 runs beside
// two CPU hogs). Stretched, the scenario is the same (the same calls, slots
// and turns; every check is in units of the interval and max_wait) with
// fairScale times the room. The fake clock plays it as written.
const fairScale = 4

// scaled is d on b's clock: d on the fake clock, d × fairScale on Redis's.
func (b backend) scaled(d time.Duration) time.Duration {
	if b.exact {
		return d
	}
	return d * fairScale
}

// playFair plays a scenario with driveFair on key and checks its outcome
// with check (which reports through errorf). On Redis's clock a round the
// driver played late by more than an interval was not the scenario as
// written (even stretched, a stall of the machine can take the slots of a
// good part of max_wait): when such a round fails, the scenario is played
// again on a fresh key, three rounds at most. A round played on time, and
// the last round, must pass; the fake clock plays one round.
func playFair(t *testing.T, b backend, key string, calls []fairCall, interval, maxWait time.Duration, check func(out []fairOutcome, errorf func(string, ...any))) {
	t.Helper()
	const rounds = 3
	for round := 1; ; round++ {
		k := key
		if round > 1 {
			k = fmt.Sprintf("%s:again%d", key, round)
		}
		out, late, err := driveFair(t, b, k, calls, interval, maxWait)
		var errs []string
		errorf := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
		if err != nil {
			errorf("%v", err)
		} else {
			check(out, errorf)
		}
		if len(errs) == 0 {
			return
		}
		if b.exact || late <= interval || round == rounds {
			for _, e := range errs {
				t.Error(e)
			}
			if late > 0 {
				t.Logf("round %d: the driver was late by up to %v", round, late)
			}
			t.FailNow()
		}
		t.Logf("round %d: the driver was late by up to %v (interval %v), not the scenario as written; again: %s", round, late, interval, strings.Join(errs, "; "))
	}
}

// slotTimes returns the slots of the outcomes granted (of share name, or
// of all when name is ""), sorted.
func slotTimes(out []fairOutcome, name string) []time.Time {
	var ts []time.Time
	for _, o := range out {
		if o.ok && (name == "" || o.call.share.Name == name) {
			ts = append(ts, o.slot)
		}
	}
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	return ts
}

// checkSpacing fails unless every two granted slots are at least interval
// apart: the carrier never gets more than its cps in any rolling second,
// however the slots were shared. However late the driver, this holds.
func checkSpacing(t *testing.T, out []fairOutcome, interval time.Duration) {
	t.Helper()
	ts := slotTimes(out, "")
	for i := 1; i < len(ts); i++ {
		if gap := ts[i].Sub(ts[i-1]); gap < interval {
			t.Fatalf("slots %d and %d are %v apart, want >= %v (the carrier's cps)", i-1, i, gap, interval)
		}
	}
}

func burst(name string, share Share, at time.Duration, n int) []fairCall {
	calls := make([]fairCall, n)
	for i := range calls {
		calls[i] = fairCall{at: at, member: fmt.Sprintf("%s-%d", name, i), share: share}
	}
	return calls
}

// steady is n calls of share, one every `every` from at.
func steady(name string, share Share, at, every time.Duration, n int) []fairCall {
	calls := make([]fairCall, n)
	for i := range calls {
		calls[i] = fairCall{at: at + time.Duration(i)*every, member: fmt.Sprintf("%s-%d", name, i), share: share}
	}
	return calls
}

// interleave merges call lists keeping each one's order and alternating
// between them at equal times.
func interleave(lists ...[]fairCall) []fairCall {
	var out []fairCall
	for i := 0; ; i++ {
		added := false
		for _, l := range lists {
			if i < len(l) {
				out = append(out, l[i])
				added = true
			}
		}
		if !added {
			break
		}
	}
	slices.SortStableFunc(out, func(a, b fairCall) int { return cmp.Compare(a.at, b.at) })
	return out
}

func granted(out []fairOutcome, name string) int { return len(slotTimes(out, name)) }

// Two shares backlogged on one carrier split its slots by weight (1:3),
// and the carrier's spacing holds.
func TestFairWeightedSplit(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend, key string) {
		interval, maxWait := b.scaled(10*time.Millisecond), b.scaled(time.Second)
		a, bb := Share{Name: "customer:a", Weight: 1}, Share{Name: "customer:b", Weight: 3}
		playFair(t, b, key, interleave(burst("a", a, 0, 60), burst("b", bb, 0, 120)), interval, maxWait, func(out []fairOutcome, errorf func(string, ...any)) {
			checkSpacing(t, out, interval)
			na, nb := granted(out, a.Name), granted(out, bb.Name)
			// 100 slots within max_wait: a quarter to a, three to b (a call
			// or two more each for the first ones, taken at once).
			if na < 20 || na > 30 || nb < 65 || nb > 80 {
				errorf("granted a %d, b %d; want about 25 and 75 (weights 1:3 of 100 slots)", na, nb)
			}
			for _, o := range out {
				if o.ok && o.wait > maxWait && b.exact {
					errorf("%s waited %v, beyond max_wait %v", o.call.member, o.wait, maxWait)
				}
			}
		})
	})
}

// A share that arrives when another has booked the carrier's whole
// max_wait is not refused nor queued behind it: its calls, at its share's
// rate, get a slot within two intervals, and the first share's calls go
// after them. First come, first served would make it wait the whole
// max_wait (or refuse it).
func TestFairNewcomerNotQueuedBehindABurst(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend, key string) {
		interval, maxWait := b.scaled(10*time.Millisecond), b.scaled(time.Second)
		a, bb := Share{Name: "customer:a", Weight: 1}, Share{Name: "customer:b", Weight: 1}
		calls := append(burst("a", a, 0, 100), steady("b", bb, b.scaled(100*time.Millisecond), b.scaled(40*time.Millisecond), 12)...)
		playFair(t, b, key, calls, interval, maxWait, func(out []fairOutcome, errorf func(string, ...any)) {
			checkSpacing(t, out, interval)
			lead := shareLead(interval)
			for _, o := range out {
				if o.call.share != bb {
					continue
				}
				if !o.ok {
					errorf("%s refused, want a slot (its share is half the carrier)", o.call.member)
					continue
				}
				if o.wait > 2*interval+lead && b.exact {
					errorf("%s waited %v, want at most two intervals (%v)", o.call.member, o.wait, 2*interval)
				}
				if o.wait > maxWait/2 {
					errorf("%s waited %v: queued behind the burst", o.call.member, o.wait)
				}
			}
		})
	})
}

// Work-conserving: a share alone gets every slot (a burst is spaced by
// one interval, the carrier's full rate); and with a second share that
// calls at a tenth of its part, the first takes what the second leaves.
func TestFairWorkConserving(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend, key string) {
		interval, maxWait := b.scaled(10*time.Millisecond), b.scaled(time.Second)
		a, bb := Share{Name: "customer:a", Weight: 1}, Share{Name: "customer:b", Weight: 1}
		playFair(t, b, key+":alone", burst("a", a, 0, 50), interval, maxWait, func(out []fairOutcome, errorf func(string, ...any)) {
			checkSpacing(t, out, interval)
			ts := slotTimes(out, "")
			if len(ts) != 50 {
				errorf("alone: granted %d of 50 (0.5 s of slots within max_wait 1 s)", len(ts))
				return
			}
			if span := ts[49].Sub(ts[0]); b.exact && span != 49*interval {
				errorf("alone: 50 slots span %v, want %v (back to back)", span, 49*interval)
			}
		})

		// a offers 200 calls a second, b 5: a gets nearly all the rest.
		calls := interleave(steady("a", a, 0, b.scaled(5*time.Millisecond), 200), steady("b", bb, 0, b.scaled(200*time.Millisecond), 5))
		playFair(t, b, key+":light", calls, interval, maxWait, func(out []fairOutcome, errorf func(string, ...any)) {
			checkSpacing(t, out, interval)
			if n := granted(out, bb.Name); n != 5 {
				errorf("light share: granted %d of 5", n)
			}
			// In the first second (the calls' span) the carrier has 100
			// slots: b takes 5, a half of them by its turns and most of
			// the rest by taking a slot the moment it is free.
			all := slotTimes(out, "")
			if len(all) == 0 {
				errorf("light: nothing granted")
				return
			}
			inSecond := 0
			for _, ts := range slotTimes(out, a.Name) {
				if ts.Sub(all[0]) < b.scaled(time.Second) {
					inSecond++
				}
			}
			if inSecond < 75 {
				errorf("busy share: %d slots in the first second, want >= 75 (of the 95 the light one leaves)", inSecond)
			}
		})
	})
}

// turnOf is the turn of a booking, on the store's clock.
func turnOf(s Slot, interval time.Duration) time.Time {
	return s.At.Add(s.Wait + shareLead(interval))
}

// A released reservation (booking or slot) gives its share the turn back,
// once: the next call of that share books the turn the released one had.
func TestFairReleaseGivesTheTurnBack(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend, key string) {
		ctx := context.Background()
		// The checks below need a-1's slot (+1 interval) still ahead of
		// Redis's clock until the last Queue, some 20 round trips on: an
		// interval of 100 ms was the margin for every stall of the test
		// and of Redis on the way; a second is.
		const interval, maxWait = time.Second, 50 * time.Second
		a := Share{Name: "peer:a", Weight: 1}
		var s [8]Slot
		for i := range 5 {
			s[i] = reserveShare(t, b.store, key, fmt.Sprintf("a-%d", i), a, interval, maxWait)
		}
		// Alone, one interval a turn: the first two calls are within the
		// share and get slots, the rest book turns 2, 3, 4.
		t0 := s[0].At.Add(s[0].Wait)
		for i, want := range []time.Duration{0, interval} {
			if s[i].Booked || !s[i].OK || !s[i].At.Add(s[i].Wait).Equal(t0.Add(want)) {
				t.Fatalf("call %d: %+v, want a slot at +%v", i, s[i], want)
			}
		}
		for i := 2; i < 5; i++ {
			if !s[i].Booked || !turnOf(s[i], interval).Equal(t0.Add(time.Duration(i)*interval)) {
				t.Fatalf("call %d: %+v (turn +%v), want a booking of turn +%v", i, s[i], turnOf(s[i], interval).Sub(t0), time.Duration(i)*interval)
			}
		}
		q, err := b.store.Queue(ctx, key, interval)
		if err != nil || q.Queued != 4 {
			t.Fatalf("Queue = %+v, %v; want 4 queued (a slot ahead, 3 bookings)", q, err)
		}
		release := func(m string) {
			t.Helper()
			if err := b.store.Release(ctx, key, m); err != nil {
				t.Fatal(err)
			}
		}
		// The share's turns so far run to +5 intervals. Releasing the
		// last booking (twice: one refund) gives its turn to the next call.
		release("a-4")
		release("a-4")
		s[5] = reserveShare(t, b.store, key, "a-5", a, interval, maxWait)
		s[6] = reserveShare(t, b.store, key, "a-6", a, interval, maxWait)
		for i, want := range map[int]time.Duration{5: 4 * interval, 6: 5 * interval} {
			if got := turnOf(s[i], interval).Sub(t0); !s[i].Booked || got != want {
				t.Fatalf("after releasing the last booking: call %d's turn +%v, want +%v", i, got, want)
			}
		}
		// A slot released gives back its place and one turn.
		release("a-1")
		if b.held(key, "a-1") {
			t.Fatal("released slot still held")
		}
		s[7] = reserveShare(t, b.store, key, "a-7", a, interval, maxWait)
		if got := turnOf(s[7], interval).Sub(t0); !s[7].Booked || got != 5*interval {
			t.Fatalf("after releasing a slot: next call's turn +%v, want +%v", got, 5*interval)
		}
		other := reserveShare(t, b.store, key, "b-0", Share{Name: "peer:b", Weight: 1}, interval, maxWait)
		if got := other.At.Add(other.Wait).Sub(t0); !other.OK || other.Booked || got != interval {
			t.Fatalf("another share's first call: %+v at +%v, want the released slot, +%v", other, got, interval)
		}
		// b's slot, and a's bookings a-2, a-3, a-5, a-6, a-7.
		if q, err = b.store.Queue(ctx, key, interval); err != nil || q.Queued != 6 {
			t.Fatalf("Queue = %+v, %v; want 6 queued (b's slot, 5 bookings)", q, err)
		}
	})
}

// A booking, reserved again at its turn, becomes the slot at its turn (on
// Redis's clock, which runs on, the first free slot from when it asked,
// should that be past the turn); asked again, it keeps that slot.
func TestFairBookingBecomesASlot(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend, key string) {
		const interval, maxWait = 100 * time.Millisecond, 5 * time.Second
		a := Share{Name: "peer:a", Weight: 1}
		var s [3]Slot
		for i := range s {
			s[i] = reserveShare(t, b.store, key, fmt.Sprintf("a-%d", i), a, interval, maxWait)
		}
		if !s[2].Booked {
			t.Fatalf("third call: %+v, want a booking", s[2])
		}
		turn := turnOf(s[2], interval)
		b.advance(s[2].Wait)
		got := reserveShare(t, b.store, key, "a-2", a, interval, maxWait)
		want := turn
		if got.At.After(turn) && !b.exact {
			want = got.At // Redis's clock ran past the turn: the first free slot from now
		}
		if got.Booked || !got.OK || !got.At.Add(got.Wait).Equal(want) {
			t.Fatalf("at its turn: %+v (slot %v after the turn), want the slot at its turn", got, got.At.Add(got.Wait).Sub(turn))
		}
		if !b.held(key, "a-2") {
			t.Fatal("booking's slot not held")
		}
		again := reserveShare(t, b.store, key, "a-2", a, interval, maxWait)
		if !again.At.Add(again.Wait).Equal(want) || again.Booked {
			t.Fatalf("asked again: %+v, want the same slot", again)
		}
	})
}

// The fair state of a carrier is bounded in time: every key expires, and
// on the fake clock nothing of it is left once its records have expired.
func TestFairStateExpires(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend, key string) {
		const interval, maxWait = 10 * time.Millisecond, time.Second
		a := Share{Name: "peer:a", Weight: 1}
		for i := range 20 {
			reserveShare(t, b.store, key, fmt.Sprintf("a-%d", i), a, interval, maxWait)
		}
		if b.fairTTL != nil {
			for _, k := range []string{key + ":fair", key + ":fairx"} {
				if ttl := b.fairTTL(k); ttl <= maxWait || ttl > maxWait+recordKeep+3*time.Second {
					t.Errorf("%s TTL %v, want in (max_wait, max_wait + record keep + 3 s]", k, ttl)
				}
			}
			return
		}
		b.advance(maxWait + recordKeep + 2*time.Second)
		if n := b.fairLen(key); n != 0 {
			t.Fatalf("%d fair entries left after every record expired", n)
		}
	})
}

func reserveShare(t *testing.T, s SlotStore, key, member string, sh Share, interval, maxWait time.Duration) Slot {
	t.Helper()
	sl, err := s.Reserve(context.Background(), key, member, sh, interval, maxWait)
	if err != nil {
		t.Fatalf("Reserve(%q): %v", member, err)
	}
	if !sl.OK {
		t.Fatalf("Reserve(%q): refused (%+v)", member, sl)
	}
	return sl
}
