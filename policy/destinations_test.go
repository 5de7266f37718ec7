package policy

import (
	"testing"
	"time"

	"github.com/cpsguard/cpsguard/admission"
	"github.com/cpsguard/cpsguard/config"
)

func destConfig() *config.Config {
	cfg := testConfig()
	cfg.Destinations = []config.Destination{
		{Prefix: "+44", CPS: 50, Route: "uk"},
		{Prefix: "4420", CPS: 5, Shadow: true},
		{Prefix: "1-900", Windows: []config.Window{{Calls: 100, Per: time.Minute}}, MaxCalls: 20},
	}
	cfg.Priority = config.Priority{Numbers: []string{"911", "+44-999"}, ResourcePriority: []string{"esnet", "ETS"}}
	cfg.RepeatDial = config.RepeatDial{Calls: 3, Per: time.Minute}
	return cfg
}

// The longest prefix wins; a leading '+' does not matter on either side.
func TestDestinationLongestPrefix(t *testing.T) {
	p := New(destConfig())
	for _, tc := range []struct{ number, want string }{
		{"+442079460000", "4420"},
		{"4420", "4420"},
		{"+4412345", "+44"},
		{"4412345", "+44"},
		{"19005550100", "1-900"},
		{"1900", "1-900"},
		{"190", ""},
		{"0044207946", ""},
		{"", ""},
	} {
		d := p.Destination(tc.number)
		got := ""
		if d != nil {
			got = d.Name
		}
		if got != tc.want {
			t.Errorf("Destination(%q): got %q, want %q", tc.number, got, tc.want)
		}
	}
	uk := p.Destination("+4412345")
	if uk.Route != "uk" || uk.Key != "t:{destination:44}" || uk.CallsKey != "t:{calls:destination:44}" {
		t.Errorf("+44: got route %q, key %q, calls key %q", uk.Route, uk.Key, uk.CallsKey)
	}
	if bs := uk.Buckets(uk.CPS, uk.Burst); len(bs) != 1 || bs[0].Limit != 50 || bs[0].Over != admission.OverRefuse {
		t.Errorf("+44 buckets: got %+v, want one 1 s window of 50, enforced", bs)
	}
	if bs := p.Destination("4420").Buckets(5, 0); len(bs) != 1 || bs[0].Over != admission.OverShadow {
		t.Errorf("4420 (shadow) buckets: got %+v, want one shadowed window", bs)
	}
	prem := p.Destination("1900")
	if bs := prem.Buckets(prem.CPS, prem.Burst); len(bs) != 1 || bs[0].Limit != 100 || bs[0].Key != "t:{destination:1900}:w60s" {
		t.Errorf("1-900 buckets: got %+v, want its minute window only (no cps)", bs)
	}
	if prem.MaxCalls != 20 {
		t.Errorf("1-900 max_calls: got %d, want 20", prem.MaxCalls)
	}
}

// Emergency numbers match with '+' significant: 911 is not +91 1….
func TestPriorityNumber(t *testing.T) {
	p := New(destConfig())
	for number, want := range map[string]bool{
		"911": true, "9115": true, "+911123456789": false, "+44999": true, "44999": false, "112": false, "": false,
	} {
		if got := p.PriorityNumber(number); got != want {
			t.Errorf("PriorityNumber(%q): got %v, want %v", number, got, want)
		}
	}
}

// An entry ending in '$' matches its number only: 112$ is not 1123…, the
// way 911 (a prefix) is 9111234567, an Indian mobile number in national
// form that would pass every limit.
func TestPriorityNumberExact(t *testing.T) {
	cfg := destConfig()
	cfg.Priority.Numbers = []string{"911", "112$", "+44-999$"}
	p := New(cfg)
	for number, want := range map[string]bool{
		"911": true, "9111234567": true,
		"112": true, "1123456789": false, "11": false,
		"+44999": true, "+449991": false, "44999": false,
	} {
		if got := p.PriorityNumber(number); got != want {
			t.Errorf("PriorityNumber(%q) with %q: got %v, want %v", number, cfg.Priority.Numbers, got, want)
		}
	}
}

func TestResourcePriorityValues(t *testing.T) {
	p := New(destConfig())
	for value, want := range map[string]bool{
		"esnet.1":              true,
		"ESNET.0":              true,
		"dsn.flash, ets.2":     true,
		" wps.3 ,  ets.1 ":     true,
		"dsn.flash":            false,
		"esnet":                false,
		"esnet.":               false,
		".1":                   false,
		"":                     false,
		"esnetx.1":             false,
		"x.1,,,,,,,,,,,esnet0": false,
	} {
		if got := p.ResourcePriority(value); got != want {
			t.Errorf("ResourcePriority(%q): got %v, want %v", value, got, want)
		}
	}
	if New(testConfig()).ResourcePriority("esnet.1") {
		t.Error("no namespaces configured: a value claimed priority")
	}
}

func TestRepeatDialBucket(t *testing.T) {
	cfg := destConfig()
	p := New(cfg)
	b, ok := p.RepeatDial("+15550100")
	if !ok || b.Limit != 3 || b.Window != time.Minute+admission.WindowGuard || b.Key != RepeatKey("t", "15550100") || b.Over != admission.OverRefuse {
		t.Errorf("RepeatDial(+15550100): got %+v, %v", b, ok)
	}
	if b2, _ := p.RepeatDial("15550100"); b2.Key != b.Key {
		t.Errorf("a leading '+' gives another bucket: %q, %q", b2.Key, b.Key)
	}
	if _, ok := p.RepeatDial(""); ok {
		t.Error("a call without a number got a repeat_dial bucket")
	}
	cfg.RepeatDial.Shadow = true
	if b, _ := New(cfg).RepeatDial("1"); b.Over != admission.OverShadow {
		t.Errorf("shadowed repeat_dial: got over %d, want OverShadow", b.Over)
	}
	cfg.RepeatDial.Calls = 0
	if _, ok := New(cfg).RepeatDial("1"); ok {
		t.Error("repeat_dial off: got a bucket")
	}
}

// A peer's shadow (or the global one) shadows its buckets.
func TestScopedShadow(t *testing.T) {
	cfg := testConfig()
	cfg.Peers[0].Shadow = true
	p := New(cfg)
	pe := p.Peer(&cfg.Peers[0])
	for _, b := range pe.Buckets(pe.CPS, pe.Burst) {
		if b.Over != admission.OverShadow {
			t.Errorf("peer shadow: bucket %s over %d, want OverShadow", b.Key, b.Over)
		}
	}
	cu := p.Customer(&cfg.Customers[0])
	if b := cu.Buckets(cu.CPS, 0)[0]; b.Over != admission.OverRefuse || cu.Shadow {
		t.Errorf("customer without shadow: over %d, shadow %v", b.Over, cu.Shadow)
	}
	cfg.Shadow = true
	if cu := New(cfg).Customer(&cfg.Customers[0]); !cu.Shadow || cu.Buckets(cu.CPS, 0)[0].Over != admission.OverShadow {
		t.Error("global shadow: the customer's buckets are not shadowed")
	}
}
