package pacing

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cpsguard/cpsguard/lua"
)

// The pause contract (issue 22, items A5 and B), run against every store:
// a paused carrier refuses a slot at once, however long the call may
// wait; its future slots go; after the span one call is the half-open
// probe; the probe's outcome, a good OPTIONS probe or an operator end it.

func readPause(t *testing.T, b backend, key string) Pause {
	t.Helper()
	st, err := b.store.Paused(context.Background(), key)
	if err != nil {
		t.Fatalf("Paused: %v", err)
	}
	return st
}

// TestPauseRefusesAtOnce: during a pause every reservation is refused at
// once as paused, with what is left of the span, and holds nothing; a
// shorter pause does not shorten it; Paused reads it back.
func TestPauseRefusesAtOnce(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend, key string) {
		ctx := context.Background()
		// On Redis's clock the span runs down while the test runs: what
		// is left of it is 2 s less at most the time since before (whole
		// ms: 1 ms more), its age at most that time. A fixed 100 ms
		// margin failed when the machine stalled; these bounds widen
		// with the stall and cannot fail for it.
		const span = 2 * time.Second
		before := time.Now()
		least := func() time.Duration { return span - time.Since(before) - time.Millisecond }
		oldest := func() time.Duration { return time.Since(before) + time.Millisecond }
		st, err := b.store.Pause(ctx, key, span, "Retry-After 2")
		if lo := least(); err != nil || !st.Paused || !st.Changed || st.Left < lo || st.Left > span || st.Reason != "Retry-After 2" {
			t.Fatalf("Pause = %+v, %v; want paused 2 s (left in [%v, %v]), changed", st, err, lo, span)
		}
		s := reserve(t, b.store, key, "call-a", 10*time.Millisecond, time.Minute)
		if lo := least(); s.OK || !s.Paused || s.Wait < lo || s.Wait > span {
			t.Fatalf("reserve within a minute during a 2 s pause: %+v, want refused as paused with what is left of 2 s, in [%v, %v]", s, lo, span)
		}
		if b.held(key, "call-a") {
			t.Fatal("a refused call holds a slot")
		}
		if st, err = b.store.Pause(ctx, key, 100*time.Millisecond, "shorter"); err != nil || st.Changed || st.Left < least() || st.Reason != "Retry-After 2" {
			t.Fatalf("shorter Pause = %+v, %v; want the 2 s pause unchanged", st, err)
		}
		st = readPause(t, b, key)
		if !st.Paused || st.HalfOpen() || st.Probing || st.Left < least() || st.Age > oldest() || st.Reason != "Retry-After 2" {
			t.Fatalf("Paused = %+v; want the 2 s pause", st)
		}
		if b.exact && (st.Left != 2*time.Second || st.Age != 0) {
			t.Errorf("exact store: left %v, age %v; want 2s, 0s", st.Left, st.Age)
		}
		if _, err := b.store.Pause(ctx, key, 0, "x"); err == nil {
			t.Error("a zero span is accepted")
		}
		if st := readPause(t, b, lua.Key("test", "carrier", "none")); st.Paused {
			t.Errorf("a carrier never paused: %+v", st)
		}
	})
}

// TestPauseRemovesFutureSlots: the slots still in the future when the
// carrier is paused are removed (their holders must not send); a slot
// already due stays.
func TestPauseRemovesFutureSlots(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend, key string) {
		for i := range 3 {
			reserve(t, b.store, key, fmt.Sprintf("call-%d", i), time.Second, 5*time.Second)
		}
		if _, err := b.store.Pause(context.Background(), key, time.Second, "x"); err != nil {
			t.Fatal(err)
		}
		for i, want := range []bool{true, false, false} {
			if got := b.held(key, fmt.Sprintf("call-%d", i)); got != want {
				t.Errorf("call-%d held %v after the pause, want %v", i, got, want)
			}
		}
	})
}

// TestPauseHalfOpen: once the span is over, the first call to get a slot
// is the probe and every other call is refused as paused; a failed probe
// lets the next call try, an answered one ends the pause. Only the
// probe's own member counts.
func TestPauseHalfOpen(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend, key string) {
		ctx := context.Background()
		const interval = 10 * time.Millisecond
		if _, err := b.store.Pause(ctx, key, 200*time.Millisecond, "x"); err != nil {
			t.Fatal(err)
		}
		b.advance(250 * time.Millisecond)
		if st := readPause(t, b, key); !st.HalfOpen() || st.Probing {
			t.Fatalf("after the span: %+v, want half-open, no probe", st)
		}
		a := reserve(t, b.store, key, "call-a", interval, time.Second)
		if !a.OK || !a.Probe || a.Paused {
			t.Fatalf("first call after the span: %+v, want the probe", a)
		}
		if again := reserve(t, b.store, key, "call-a", interval, time.Second); !again.OK || !again.Probe {
			t.Fatalf("the probe asking again: %+v, want its slot, still the probe", again)
		}
		for _, m := range []string{"call-b", "call-c"} {
			if s := reserve(t, b.store, key, m, interval, time.Second); s.OK || !s.Paused {
				t.Fatalf("%s while the probe is out: %+v, want refused as paused", m, s)
			}
		}
		if st := readPause(t, b, key); !st.Probing {
			t.Fatalf("Paused while the probe is out: %+v, want probing", st)
		}
		if st, err := b.store.ProbeDone(ctx, key, "call-b", true); err != nil || st.Changed || !st.Paused {
			t.Fatalf("ProbeDone of a call that is not the probe = %+v, %v; want no change", st, err)
		}
		if st, err := b.store.ProbeDone(ctx, key, "call-a", false); err != nil || !st.Changed || !st.Paused || st.Probing {
			t.Fatalf("failed probe = %+v, %v; want still paused, claim freed", st, err)
		}
		c := reserve(t, b.store, key, "call-c", interval, time.Second)
		if !c.OK || !c.Probe {
			t.Fatalf("next call after a failed probe: %+v, want the probe", c)
		}
		st, err := b.store.ProbeDone(ctx, key, "call-c", true)
		if err != nil || !st.Changed || st.Paused || st.Reason != "x" {
			t.Fatalf("answered probe = %+v, %v; want the pause ended", st, err)
		}
		if d := reserve(t, b.store, key, "call-d", interval, time.Second); !d.OK || d.Probe || d.Paused {
			t.Fatalf("after the pause: %+v, want an ordinary slot", d)
		}
		if _, err := b.store.ProbeDone(ctx, key, "", true); err == nil {
			t.Error("ProbeDone without a member accepted")
		}
	})
}

// TestPauseProbeClaimExpires: a probe whose call never reports (its node
// died) frees the carrier for the next one after max_wait + ProbeClaim.
func TestPauseProbeClaimExpires(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend, key string) {
		if !b.exact {
			t.Skip("needs a fake clock (ProbeClaim is 32 s)")
		}
		ctx := context.Background()
		if _, err := b.store.Pause(ctx, key, time.Second, "x"); err != nil {
			t.Fatal(err)
		}
		b.advance(time.Second)
		if s := reserve(t, b.store, key, "lost", 10*time.Millisecond, time.Second); !s.Probe {
			t.Fatalf("first call after the span: %+v, want the probe", s)
		}
		b.advance(time.Second + ProbeClaim - time.Millisecond)
		if s := reserve(t, b.store, key, "next", 10*time.Millisecond, time.Second); !s.Paused {
			t.Fatalf("before the claim ends: %+v, want paused", s)
		}
		b.advance(time.Millisecond)
		if s := reserve(t, b.store, key, "next", 10*time.Millisecond, time.Second); !s.OK || !s.Probe {
			t.Fatalf("once the claim ended: %+v, want the new probe", s)
		}
	})
}

// TestPauseExtendedDropsTheProbe: paused again while half-open (the probe,
// or a call sent before, got another Retry-After), the span runs again
// and the old probe's answer no longer ends it.
func TestPauseExtendedDropsTheProbe(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend, key string) {
		ctx := context.Background()
		if _, err := b.store.Pause(ctx, key, 100*time.Millisecond, "first"); err != nil {
			t.Fatal(err)
		}
		b.advance(150 * time.Millisecond)
		if s := reserve(t, b.store, key, "probe", 10*time.Millisecond, time.Second); !s.Probe {
			t.Fatalf("first call after the span: %+v, want the probe", s)
		}
		st, err := b.store.Pause(ctx, key, 5*time.Second, "second")
		if err != nil || !st.Changed || st.Probing || st.HalfOpen() || st.Reason != "second" || st.Age < 150*time.Millisecond {
			t.Fatalf("paused again = %+v, %v; want a new 5 s span, no probe, the first pause's start", st, err)
		}
		if st, err := b.store.ProbeDone(ctx, key, "probe", true); err != nil || st.Changed || !st.Paused {
			t.Fatalf("the old probe answered = %+v, %v; want no change", st, err)
		}
	})
}

// TestOpenPause: a good OPTIONS probe ends the span of a pause older than
// the probe (half-open: one call tries); a younger pause stays.
func TestOpenPause(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend, key string) {
		ctx := context.Background()
		if st, err := b.store.OpenPause(ctx, key, 0); err != nil || st.Paused || st.Changed {
			t.Fatalf("OpenPause with no pause = %+v, %v; want nothing", st, err)
		}
		if _, err := b.store.Pause(ctx, key, time.Minute, "x"); err != nil {
			t.Fatal(err)
		}
		if st, err := b.store.OpenPause(ctx, key, time.Hour); err != nil || st.Changed || st.HalfOpen() {
			t.Fatalf("OpenPause of a pause younger than the probe = %+v, %v; want no change", st, err)
		}
		st, err := b.store.OpenPause(ctx, key, 0)
		if err != nil || !st.Changed || !st.HalfOpen() {
			t.Fatalf("OpenPause = %+v, %v; want half-open", st, err)
		}
		if s := reserve(t, b.store, key, "try", 10*time.Millisecond, time.Second); !s.OK || !s.Probe {
			t.Fatalf("after a good probe: %+v, want the probe call", s)
		}
		if _, err := b.store.OpenPause(ctx, key, -time.Second); err == nil {
			t.Error("a negative min age is accepted")
		}
	})
}

// TestUnpause: an operator ends a pause at once; with none, nothing
// changes.
func TestUnpause(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend, key string) {
		ctx := context.Background()
		if st, err := b.store.Unpause(ctx, key); err != nil || st.Changed || st.Paused {
			t.Fatalf("Unpause with no pause = %+v, %v; want no change", st, err)
		}
		if _, err := b.store.Pause(ctx, key, time.Hour, "Retry-After 3600"); err != nil {
			t.Fatal(err)
		}
		st, err := b.store.Unpause(ctx, key)
		if err != nil || !st.Changed || st.Paused || st.Reason != "Retry-After 3600" || st.Left < 59*time.Minute {
			t.Fatalf("Unpause = %+v, %v; want the lifted hour-long pause", st, err)
		}
		if s := reserve(t, b.store, key, "after", 10*time.Millisecond, time.Second); !s.OK || s.Paused || s.Probe {
			t.Fatalf("after Unpause: %+v, want an ordinary slot", s)
		}
	})
}

// TestPauseForgotten: a pause no call tries is forgotten pauseKeep after
// its span.
func TestPauseForgotten(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend, key string) {
		before := time.Now()
		if _, err := b.store.Pause(context.Background(), key, 2*time.Second, "x"); err != nil {
			t.Fatal(err)
		}
		if b.ttl != nil {
			// Set at the Pause, run down since by at most the time since
			// before (PTTL counts whole ms): no stall can fail it.
			want := 3*time.Second + pauseKeep
			if ttl, lo := b.ttl(lua.PauseKey(key)), want-time.Since(before)-time.Millisecond; ttl < lo || ttl > want {
				t.Fatalf("pause TTL %v, want span + %v + 1 s: in [%v, %v]", ttl, pauseKeep, lo, want)
			}
			return
		}
		b.advance(2*time.Second + pauseKeep - time.Nanosecond)
		if !readPause(t, b, key).Paused {
			t.Fatal("pause forgotten before its keep")
		}
		b.advance(time.Nanosecond)
		if readPause(t, b, key).Paused {
			t.Fatal("pause kept past its keep")
		}
	})
}

// TestEvidencePoolWide: the store counts a carrier's callers and the
// peers it gave overload answers across every caller of the store (every
// node of a pool), each within its window.
func TestEvidencePoolWide(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend, key string) {
		ctx := context.Background()
		w := EvidenceWindows{Callers: time.Second, Overload: 200 * time.Millisecond}
		ev := func(peer string, overload bool) Evidence {
			t.Helper()
			e, err := b.store.Evidence(ctx, key, peer, overload, w)
			if err != nil {
				t.Fatalf("Evidence: %v", err)
			}
			return e
		}
		if e := ev("peer-a", false); e != (Evidence{Callers: 1}) {
			t.Fatalf("first call: %+v, want 1 caller", e)
		}
		if e := ev("peer-b", true); e != (Evidence{Callers: 2, Overloaded: 1}) {
			t.Fatalf("peer-b refused: %+v, want 2 callers, 1 overloaded", e)
		}
		if e := ev("peer-b", true); e != (Evidence{Callers: 2, Overloaded: 1}) {
			t.Fatalf("peer-b refused again: %+v, want still 1 overloaded (peers, not answers)", e)
		}
		if e := ev("peer-a", true); e != (Evidence{Callers: 2, Overloaded: 2}) {
			t.Fatalf("peer-a refused: %+v, want 2 overloaded", e)
		}
		b.advance(300 * time.Millisecond)
		if e := ev("peer-c", false); e != (Evidence{Callers: 3}) {
			t.Fatalf("after the overload window: %+v, want 3 callers, none overloaded", e)
		}
		b.advance(800 * time.Millisecond)
		if e := ev("peer-c", true); e != (Evidence{Callers: 1, Overloaded: 1}) {
			t.Fatalf("after the callers window: %+v, want peer-c alone", e)
		}
		if _, err := b.store.Evidence(ctx, key, "", true, w); err == nil {
			t.Error("evidence without a peer accepted")
		}
		if _, err := b.store.Evidence(ctx, key, "p", true, EvidenceWindows{}); err == nil {
			t.Error("evidence with no windows accepted")
		}
	})
}

// TestAdaptCutRemovesFutureSlots: an AIMD decrease removes the slots
// still in the future (spaced for the old rate) and reports when it was
// made, on the store's clock, after every slot reserved before it.
func TestAdaptCutRemovesFutureSlots(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend, key string) {
		var last Slot
		for i := range 3 {
			last = reserve(t, b.store, key, fmt.Sprintf("call-%d", i), time.Second, 5*time.Second)
		}
		a := AIMD{Max: 10, Min: 1, Decrease: 0.5, Increase: 1, Hold: time.Second}
		r, err := b.store.Adapt(context.Background(), key, a, true)
		if err != nil || !r.Cut || r.CutAt.IsZero() || r.CutAt.Before(last.At) {
			t.Fatalf("Adapt = %+v, %v; want a cut after the last reservation (%v)", r, err, last.At)
		}
		for i, want := range []bool{true, false, false} {
			if got := b.held(key, fmt.Sprintf("call-%d", i)); got != want {
				t.Errorf("call-%d held %v after the cut, want %v", i, got, want)
			}
		}
		r2, err := b.store.Adapt(context.Background(), key, a, false)
		if err != nil || r2.Cut || !r2.CutAt.Equal(r.CutAt) {
			t.Fatalf("read after the cut = %+v, %v; want no cut, the same CutAt %v", r2, err, r.CutAt)
		}
	})
}
