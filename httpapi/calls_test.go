package httpapi

import (
	"context"
	"strings"
	"testing"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/policy"
)

// fakeCalls answers Count from a map of place keys.
type fakeCalls map[string]int

func (f fakeCalls) Count(_ context.Context, keys []string) ([]int, error) {
	out := make([]int, len(keys))
	for i, k := range keys {
		out[i] = f[k]
	}
	return out, nil
}

func TestStatusActiveCalls(t *testing.T) {
	cfg := testConfig()
	cfg.Peers[0].MaxCalls = 5
	cfg.Carriers[0].MaxCalls = 3
	prefix := cfg.Store.KeyPrefix
	fc := fakeCalls{
		policy.CallsKey(prefix, policy.ScopePeer, cfg.Peers[0].Name):       4,
		policy.CallsKey(prefix, policy.ScopeCarrier, cfg.Carriers[0].Name): 2,
	}
	h := New(Options{Config: func() *config.Config { return cfg }, Calls: fc})
	st := getStatus(t, h)
	if e := st.Peers[0]; e.MaxCalls != 5 || e.ActiveCalls == nil || *e.ActiveCalls != 4 {
		t.Errorf("peer: got max %d active %v, want 5 and 4", e.MaxCalls, e.ActiveCalls)
	}
	if e := st.Carriers[0]; e.MaxCalls != 3 || e.ActiveCalls == nil || *e.ActiveCalls != 2 {
		t.Errorf("carrier: got max %d active %v, want 3 and 2", e.MaxCalls, e.ActiveCalls)
	}
	if e := st.Customers[0]; e.MaxCalls != 0 || e.ActiveCalls != nil {
		t.Errorf("customer without max_calls: got max %d active %v, want 0 and null", e.MaxCalls, e.ActiveCalls)
	}
	var b strings.Builder
	RenderStatus(&b, st)
	if out := b.String(); !strings.Contains(out, "CALLS") || !strings.Contains(out, "4/5") || !strings.Contains(out, "2/3") {
		t.Errorf("table without active/max calls:\n%s", out)
	}
}
