package dialogtoken

import (
	"crypto/hmac"
	"crypto/sha256"
	"strings"
	"testing"
)

// TestSumIsHMACOfTheJoinedInput: Sum is the HMAC-SHA256, under the
// secret, of payload, a zero byte, the Call-ID, a zero byte and the From
// tag, whatever their lengths (an oversized Call-ID too, which the pool
// does not keep).
func TestSumIsHMACOfTheJoinedInput(t *testing.T) {
	secret := []byte("sum-test-secret")
	k := NewKey(secret)
	for _, tc := range []struct {
		name, payload, callID, ftag string
	}{
		{"empty", "", "", ""},
		{"stateless", "cpsguard stateless v1\x03UDP", "a84b4c76e66710@pc33", ""},
		{"with tag", "p", "call", "1928301774"},
		{"long call-id", "p", strings.Repeat("c", 3000), "t"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := hmac.New(sha256.New, secret)
			m.Write([]byte(tc.payload + "\x00" + tc.callID + "\x00" + tc.ftag))
			want := m.Sum(nil)
			for range 3 { // from a new pooled state and from a reused one
				var got [sha256.Size]byte
				k.Sum(&got, []byte(tc.payload), tc.callID, tc.ftag)
				if !hmac.Equal(got[:], want) {
					t.Fatalf("got %x, want %x", got, want)
				}
			}
		})
	}
}

// TestSumAllocatesNothing: with a warm pool, Sum allocates nothing (it
// runs two or three times per call on the stateless relay).
func TestSumAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts under the race detector")
	}
	k := NewKey([]byte("sum-test-secret"))
	payload := []byte("cpsguard stateless v1 payload of some forty bytes")
	var dst [sha256.Size]byte
	k.Sum(&dst, payload, "warm", "")
	if n := testing.AllocsPerRun(100, func() { k.Sum(&dst, payload, "a84b4c76e66710@pc33", "1928301774") }); n != 0 {
		t.Errorf("got %v allocations per Sum, want 0", n)
	}
}
