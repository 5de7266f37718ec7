package sip

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cpsguard/cpsguard/admission"
	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/metrics"
)

// admitAll admits every call and keeps nothing (fakeAdmitter keeps every
// call's buckets, which would count as allocations of the admission).
type admitAll struct{}

func (admitAll) Admit(context.Context, string, []admission.Bucket) (admission.Decision, error) {
	return admission.Decision{Admit: true, Refused: -1}, nil
}

// TestAdmitAllocations: the admission of a call with a peer and a customer
// limit (two buckets, two send gate keys) allocates each of its lists at
// most once: the buckets (to the store) and the gate keys (with room for
// the carrier's own), besides the store deadline's context and timer (4
// allocations on go1.26); the limits, the bucket owners and the over
// flags stay on the stack. It was 12 with every list grown by append.
func TestAdmitAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts under the race detector")
	}
	cfg := testConfig()
	_, pacer := newFakes()
	p, err := New(Options{Config: func() *config.Config { return cfg }, Admission: admitAll{}, Pacer: pacer,
		Metrics: metrics.New(prometheus.NewRegistry()), Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	peer, cu := cfg.Peer("dialer-1"), cfg.Customer("acme")
	c := &call{p: p, cfg: cfg, ctx: context.Background(), log: p.log, member: "m"}
	admit := func() {
		c.gateKeys = nil
		if !c.admit(peer, cu, nil, "") {
			t.Fatal("call refused")
		}
	}
	admit()
	if len(c.gateKeys) != 2 {
		t.Fatalf("got %d gate keys, want 2 (peer and customer)", len(c.gateKeys))
	}
	if n := testing.AllocsPerRun(100, admit); n > 6 {
		t.Errorf("got %v allocations per admission, want at most 6", n)
	}
}
