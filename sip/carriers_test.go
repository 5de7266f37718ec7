package sip

import (
	"sync"
	"testing"

	"github.com/cpsguard/cpsguard/carriers"
	"github.com/cpsguard/cpsguard/config"
)

// reportingCarriers is a real carriers.Set that also records every
// outcome the proxy reports.
type reportingCarriers struct {
	*carriers.Set
	mu  sync.Mutex
	got []carriers.Outcome
}

func newReportingCarriers(t testing.TB, cfg *config.Config, pacer *fakePacer) *reportingCarriers {
	t.Helper()
	set, err := carriers.New(carriers.Options{Config: func() *config.Config { return cfg }, Pacer: pacer, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	return &reportingCarriers{Set: set}
}

// Report records o and passes it on.
func (r *reportingCarriers) Report(cfg *config.Config, car *config.Carrier, o carriers.Outcome) {
	r.mu.Lock()
	r.got = append(r.got, o)
	r.mu.Unlock()
	r.Set.Report(cfg, car, o)
}

// last is the last outcome reported (zero: none).
func (r *reportingCarriers) last() carriers.Outcome {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.got) == 0 {
		return carriers.Outcome{}
	}
	return r.got[len(r.got)-1]
}

// set is the harness proxy's carriers.Set.
func (h *harness) set() *carriers.Set {
	switch c := h.p.carriers.(type) {
	case *carriers.Set:
		return c
	case *reportingCarriers:
		return c.Set
	}
	panic("harness: carriers are no carriers.Set")
}
