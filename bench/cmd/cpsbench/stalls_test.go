package main

import (
	"strings"
	"testing"
	"time"
)

// stallReport groups slow calls into stalls and counts those sent during
// a mark phase (or just after it) as GC's.
func TestStallReport(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	nt := &nodeTrace{
		marks: []span{{at(1000), at(1100)}},
		busy:  map[int64]map[string]time.Duration{at(1995).UnixMilli(): {"sip.(*Proxy).sweepInvites": 900 * time.Microsecond}},
	}
	var calls []sentCall
	for ms := 0; ms < 3000; ms++ {
		fw := 500 * time.Microsecond
		switch {
		case ms >= 995 && ms < 1110: // from just before the mark to 10 ms after it
			fw = 8 * time.Millisecond
		case ms >= 2000 && ms < 2005: // another stall
			fw = 4 * time.Millisecond
		}
		calls = append(calls, sentCall{at(ms), fw})
	}
	rep := stallReport(nt, calls)
	first, _, _ := strings.Cut(rep, "\n")
	if want := "120 of 3000 calls over 3ms to the carrier; 110 of them (92 %) sent during a GC mark phase"; !strings.HasPrefix(first, want) {
		t.Fatalf("summary %q, want it to start %q", first, want)
	}
	// The stall began 5 ms before the mark: it is the mark's all the same.
	if !strings.Contains(rep, "stall at +995ms: 115 calls over 114ms, worst 8ms [GC mark]") {
		t.Errorf("no GC stall line in\n%s", rep)
	}
	if !strings.Contains(rep, "stall at +2s: 5 calls over 4ms, worst 4ms; node CPU: sip.(*Proxy).sweepInvites 0.9ms;") {
		t.Errorf("no sweep stall line in\n%s", rep)
	}
}
