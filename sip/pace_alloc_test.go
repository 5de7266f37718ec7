package sip

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cpsguard/cpsguard/carriers"
	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/metrics"
	"github.com/cpsguard/cpsguard/pacing"
)

// tracingPacer grants every slot at once, telling the trace what
// pacing.Pacer would of a slot taken after a wait; it allocates nothing.
type tracingPacer struct{}

func (tracingPacer) Acquire(_ context.Context, _ pacing.Carrier, _ string, trace pacing.Tracer, _ ...pacing.GateKey) (pacing.Ticket, error) {
	if trace != nil {
		trace.TraceReserved(pacing.Slot{OK: true, Wait: time.Millisecond}, nil)
		trace.TraceQueued(+1)
		trace.TraceQueued(-1)
	}
	return pacing.Ticket{OK: true}, nil
}

// TestAwaitCarrierAllocations: waiting for a carrier's slot costs the
// proxy one allocation for its trace (the metrics it feeds are counted
// as before): it was five, a pacing.Trace and its four closures.
func TestAwaitCarrierAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts under the race detector")
	}
	cfg := testConfig(config.Carrier{Name: "a", URI: "sip:127.0.0.1:5099", CPS: 100, MaxWait: time.Second})
	adm, _ := newFakes()
	m := metrics.New(prometheus.NewRegistry())
	set, err := carriers.New(carriers.Options{Config: func() *config.Config { return cfg }, Pacer: &fakePacer{}, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(Options{Config: func() *config.Config { return cfg }, Admission: adm, Pacer: tracingPacer{},
		Carriers: set, Metrics: m, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	car := &cfg.Carriers[0]
	keys := make([]pacing.GateKey, 0, 4)
	wait := func() {
		pc, gate := p.pacingOf(cfg, car, "dialer-1", "acme")
		_, state, _, err := p.awaitCarrier(context.Background(), p.log, car, pc, gate, "m#0", keys, nil)
		if err != nil || state != carrierReady {
			t.Fatalf("got state %v, error %v; want ready", state, err)
		}
	}
	wait()
	n := testing.AllocsPerRun(100, wait)
	// What the trace fed: the slot counted paced, the queue back to 0.
	if got := testutil.ToFloat64(m.Pacing.WithLabelValues("a", metrics.PacingPaced)); got < 101 {
		t.Errorf("paced calls counted %v, want at least 101", got)
	}
	if got := testutil.ToFloat64(m.Queued.WithLabelValues("a")); got != 0 {
		t.Errorf("queued %v, want 0", got)
	}
	if n > 1 {
		t.Errorf("got %v allocations per wait, want at most 1", n)
	}
}
