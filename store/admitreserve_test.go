package store

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cpsguard/cpsguard/admission"
	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/redistest"
	"github.com/cpsguard/cpsguard/lua"
	"github.com/cpsguard/cpsguard/pacing"
)

// On Redis, AdmitReserve admits and reserves in one script: an admitted
// call's First holds the slot Reserve would have made (in Redis), the
// admission is mirrored into the in-process windows as Admit's is, and a
// refused call holds no slot.
func TestAdmitReserveOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	s, _ := open(t, redisConfig(srv.Addr(), PolicyLocal))
	if !s.Reserves() {
		t.Fatal("Reserves() = false on Redis, want true")
	}
	ctx := context.Background()
	slots := lua.Key("fo", "carrier", "ar")
	ask := func(m string) pacing.Ask {
		return pacing.Ask{Key: slots, Member: m, Interval: 100 * time.Millisecond, MaxWait: 5 * time.Second}
	}
	var start time.Time // the first slot's time on the store's clock
	for i := range 4 {
		m := fmt.Sprint("c", i)
		d, first, reserved, err := s.AdmitReserve(ctx, m, bucket, ask(m))
		if err != nil || !d.Admit || !reserved || !first.Slot.OK || first.Slot.Member != m || first.Slot.Key != slots {
			t.Fatalf("call %d: %+v %+v reserved %v, %v; want admitted with its slot", i, d, first, reserved, err)
		}
		if _, err := s.client.ZScore(ctx, slots, m).Result(); err != nil {
			t.Fatalf("call %d: its slot is not in Redis: %v", i, err)
		}
		// The slot's time (the store's clock when decided, plus the wait)
		// is independent of how long the calls before it took; a wait
		// alone shrinks with the time spent between calls.
		at := first.Slot.At.Add(first.Slot.Wait)
		if i == 0 {
			start = at
		}
		if got, want := at.Sub(start), time.Duration(i)*100*time.Millisecond; got < want-time.Millisecond || got > want+time.Millisecond {
			t.Fatalf("call %d: slot %v after the first, want %v (slots 100 ms apart)", i, got, want)
		}
	}
	d, _, reserved, err := s.AdmitReserve(ctx, "c4", bucket, ask("c4"))
	if err != nil || d.Admit || reserved {
		t.Fatalf("5th call over the limit of 4: %+v reserved %v, %v; want refused, no slot", d, reserved, err)
	}
	if _, err := s.client.ZScore(ctx, slots, "c4").Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("a refused call holds a slot: %v", err)
	}
	// Mirrored: the in-process window holds the 4 calls admitted on Redis.
	if counts, err := s.o.Local.Counts(ctx, bucket); err != nil || counts[0] != 4 {
		t.Fatalf("in-process window: %v, %v; want 4 (mirrored as Admit mirrors)", counts, err)
	}
}

// With Redis down, AdmitReserve decides as Admit does (the fallback, per
// policy) and reserves nothing: the caller reserves through the Pacer.
func TestAdmitReserveFallsBack(t *testing.T) {
	for _, policy := range []string{PolicyLocal, PolicyAdmit, PolicyReject} {
		t.Run(policy, func(t *testing.T) {
			srv := redistest.Start(t)
			s, _ := open(t, redisConfig(srv.Addr(), policy))
			srv.Kill()
			ctx := context.Background()
			ask := pacing.Ask{Key: lua.Key("fo", "carrier", "fb"), Member: "m", Interval: time.Millisecond, MaxWait: time.Second}
			for i := range 3 {
				d, _, reserved, err := s.AdmitReserve(ctx, fmt.Sprint("m", i), bucket, ask)
				if reserved {
					t.Fatalf("call %d reserved with Redis down", i)
				}
				switch policy {
				case PolicyReject:
					if !errors.Is(err, ErrStoreDown) {
						t.Fatalf("call %d: %v, want ErrStoreDown", i, err)
					}
				case PolicyAdmit:
					if err != nil || !d.Admit || d.Mode != admission.ModeOpen {
						t.Fatalf("call %d: %+v, %v; want admitted open", i, d, err)
					}
				default:
					if err != nil || !d.Admit {
						t.Fatalf("call %d: %+v, %v; want admitted on the in-process store", i, d, err)
					}
				}
			}
			waitMode(t, s, ModeFallback)
			if s.Reserves() {
				t.Error("Reserves() = true in the fallback, want false")
			}
		})
	}
}

// Without Redis (a single node on the in-process store) AdmitReserve is
// Admit, and reserves nothing.
func TestAdmitReserveInProcess(t *testing.T) {
	s, _ := open(t, &config.Config{NodeID: "solo", Store: config.Store{KeyPrefix: "fo"}})
	if s.Reserves() {
		t.Fatal("Reserves() = true in process, want false")
	}
	d, _, reserved, err := s.AdmitReserve(context.Background(), "m", bucket,
		pacing.Ask{Key: lua.Key("fo", "carrier", "ip"), Member: "m", Interval: time.Millisecond, MaxWait: time.Second})
	if err != nil || !d.Admit || reserved {
		t.Fatalf("in process: %+v reserved %v, %v; want admitted, nothing reserved", d, reserved, err)
	}
}
