package policy_test

import (
	"testing"
	"time"

	"github.com/cpsguard/cpsguard/admission"
	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/limits"
	"github.com/cpsguard/cpsguard/lua"
	"github.com/cpsguard/cpsguard/policy"
)

// TestKeysArePinned pins every key a running pool keeps its state under.
// A failure here means a change would move live pools' windows, slots,
// places or overrides to new, empty keys: change the code, not the test.
func TestKeysArePinned(t *testing.T) {
	for _, tc := range []struct {
		name, got, want string
	}{
		{"peer", policy.Key("cpsguard", policy.ScopePeer, "dialer-1"), "cpsguard:{peer:dialer-1}"},
		{"customer", policy.Key("cpsguard", policy.ScopeCustomer, "acme"), "cpsguard:{customer:acme}"},
		{"carrier", policy.Key("cpsguard", policy.ScopeCarrier, "carrier-a"), "cpsguard:{carrier:carrier-a}"},
		{"dialog", policy.DialogKey("cpsguard", "0a1b2c"), "cpsguard:{dialog:0a1b2c}"},
		{"calls peer", policy.CallsKey("cpsguard", policy.ScopePeer, "dialer-1"), "cpsguard:{calls:peer:dialer-1}"},
		{"calls customer", policy.CallsKey("cpsguard", policy.ScopeCustomer, "acme"), "cpsguard:{calls:customer:acme}"},
		{"calls carrier", policy.CallsKey("cpsguard", policy.ScopeCarrier, "carrier-a"), "cpsguard:{calls:carrier:carrier-a}"},
		{"destination", policy.Key("cpsguard", policy.ScopeDestination, "44"), "cpsguard:{destination:44}"},
		{"calls destination", policy.CallsKey("cpsguard", policy.ScopeDestination, "1900"), "cpsguard:{calls:destination:1900}"},
		{"repeat dial", policy.RepeatKey("cpsguard", "15550100"), "cpsguard:{repeat:07e73d4c25449384f7c9ea83}"},
		{"nodes", policy.NodesKey("cpsguard"), "cpsguard:{nodes:all}"},
		{"overrides", policy.OverridesKey("cpsguard"), "cpsguard:{overrides:all}"},
		{"ended dialogs", policy.EndedDialogsKey("cpsguard"), "cpsguard:{ended:dialogs}"},
		{"live calls", policy.LiveKey("cpsguard"), "cpsguard:{live:all}"},
		{"carriers out of service", policy.ServiceKey("cpsguard"), "cpsguard:{service:all}"},
		{"live calls expiries", lua.LiveExpiryKey(policy.LiveKey("cpsguard")), "cpsguard:{live:all}:expiry"},
		{"end queue", policy.LiveEndKey("cpsguard", "node-1"), "cpsguard:{live:all}:end:node-1"},
		{"override field", limits.Field(limits.ScopePeer, "dialer-1"), "peer/dialer-1"},
		{"other prefix", policy.Key("pool.b:x", policy.ScopePeer, "p"), "pool.b:x:{peer:p}"},
		// Keys derived beside a scope's key keep its hash tag.
		{"token bucket", admission.TokenBucket(policy.Key("cpsguard", policy.ScopePeer, "dialer-1"), 10, 30).Key, "cpsguard:{peer:dialer-1}:tb"},
		{"extra window", admission.WindowBucket(policy.Key("cpsguard", policy.ScopeCustomer, "acme"), 600, time.Minute).Key, "cpsguard:{customer:acme}:w60s"},
		{"extra window ms", admission.WindowBucket(policy.Key("cpsguard", policy.ScopeCustomer, "acme"), 5, 1500*time.Millisecond).Key, "cpsguard:{customer:acme}:w1500ms"},
		{"token level", lua.TokenKey(admission.TokenBucket(policy.Key("cpsguard", policy.ScopePeer, "dialer-1"), 10, 30).Key), "cpsguard:{peer:dialer-1}:tb:tokens"},
		{"override expiries", lua.OverridesExpiryKey(policy.OverridesKey("cpsguard")), "cpsguard:{overrides:all}:expiry"},
		{"node instances", lua.InstancesKey(policy.NodesKey("cpsguard")), "cpsguard:{nodes:all}:instances"},
		{"opaque readers", lua.OpaqueReadersKey(policy.NodesKey("cpsguard")), "cpsguard:{nodes:all}:opaque"},
		{"carrier rate", lua.RateKey(policy.Key("cpsguard", policy.ScopeCarrier, "carrier-a")), "cpsguard:{carrier:carrier-a}:rate"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, tc.got, tc.want)
		}
	}
}

// TestPolicyKeys checks that a derived Policy carries the pinned keys.
func TestPolicyKeys(t *testing.T) {
	cfg := &config.Config{
		Store:     config.Store{KeyPrefix: "cpsguard"},
		Peers:     []config.Peer{{Name: "dialer-1", CPS: 50, MaxCalls: 5}},
		Customers: []config.Customer{{Name: "acme", CPS: 20, Burst: 30, Windows: []config.Window{{Calls: 600, Per: time.Minute}}}},
		Carriers:  []config.Carrier{{Name: "carrier-a", URI: "sip:127.0.0.1:5070", CPS: 10, MaxWait: 2 * time.Second}},
	}
	p := policy.New(cfg)
	pe, cu, car := p.Peer(&cfg.Peers[0]), p.Customer(&cfg.Customers[0]), p.Carrier(&cfg.Carriers[0])
	for _, tc := range []struct {
		name, got, want string
	}{
		{"peer", pe.Key, "cpsguard:{peer:dialer-1}"},
		{"peer calls", pe.CallsKey, "cpsguard:{calls:peer:dialer-1}"},
		{"peer id", pe.ID, "peer:dialer-1"},
		{"customer", cu.Key, "cpsguard:{customer:acme}"},
		{"customer calls", cu.CallsKey, "cpsguard:{calls:customer:acme}"},
		{"carrier", car.Key, "cpsguard:{carrier:carrier-a}"},
		{"carrier calls", car.CallsKey, "cpsguard:{calls:carrier:carrier-a}"},
		{"carrier id", car.ID, "carrier:carrier-a"},
		{"carrier pacing", car.Pacing(7).Key, "cpsguard:{carrier:carrier-a}"},
		{"peer bucket", pe.Buckets(50, 0)[0].Key, "cpsguard:{peer:dialer-1}"},
		{"customer token bucket", cu.Buckets(20, 30)[0].Key, "cpsguard:{customer:acme}:tb"},
		{"customer window", cu.Buckets(20, 30)[1].Key, "cpsguard:{customer:acme}:w60s"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, tc.got, tc.want)
		}
	}
}
