package main

import (
	"context"
	"time"

	"github.com/cpsguard/cpsguard/calls"
	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/metrics"
	"github.com/cpsguard/cpsguard/policy"
)

// activeCallsEvery is how often cpsguard_active_calls is read from the store.
const activeCallsEvery = 2 * time.Second

// callPlace is one configured max_calls place: its metrics labels (scope,
// name) and its store key.
type callPlace struct{ scope, name, key string }

// callPlaces lists the peers, customers and carriers of cfg with max_calls.
func callPlaces(cfg *config.Config) []callPlace {
	var out []callPlace
	add := func(scope, name, key string, limit int) {
		if limit > 0 {
			out = append(out, callPlace{scope, name, key})
		}
	}
	pol := policy.Of(cfg)
	for _, p := range pol.Peers() {
		add(metrics.ScopePeer, p.Name, p.CallsKey, p.MaxCalls)
	}
	for _, c := range pol.Customers() {
		add(metrics.ScopeCustomer, c.Name, c.CallsKey, c.MaxCalls)
	}
	for _, c := range pol.Carriers() {
		add(metrics.ScopeCarrier, c.Name, c.CallsKey, c.MaxCalls)
	}
	return out
}

// syncActiveCalls sets cpsguard_active_calls from the store (pool-wide)
// every activeCallsEvery until ctx is done. A failed read keeps the last
// values.
func syncActiveCalls(ctx context.Context, cur func() *config.Config, store calls.Store, m *metrics.Metrics) {
	t := time.NewTicker(activeCallsEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cfg := cur()
		if cfg == nil {
			continue
		}
		places := callPlaces(cfg)
		if len(places) == 0 {
			continue
		}
		keys := make([]string, len(places))
		for i, p := range places {
			keys[i] = p.key
		}
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		n, err := store.Count(rctx, keys)
		cancel()
		if err != nil || len(n) != len(places) {
			continue
		}
		for i, p := range places {
			m.ActiveCalls.WithLabelValues(p.scope, p.name).Set(float64(n[i]))
		}
	}
}
