// Package metrics owns every Prometheus collector cpsguard exports (namespace
// "cpsguard"). Collectors are built on an injected prometheus.Registerer so
// tests and several nodes in one process never collide. Label values come
// only from configured names and small enums, never from SIP headers.
//
// Every counter and gauge shows its known series from the first scrape, at
// 0: New starts the label values that do not depend on the configuration
// (reload results, SIP error reasons, panic places, store scripts) and
// SyncLimits those of every configured name, so no dashboard panel reads
// "No data" and rate() and increase() see the first event of each.
//
// Failure: nothing here returns an error. New panics when a collector of
// the same name is already registered on reg (a wiring bug, found at
// start-up). SyncLimits with a nil configuration does nothing;
// ObserveReload counts any result but ReloadSuccess as a failure;
// ObserveStore counts the store error it is given; ResponseClass gives ""
// for a status code outside 100-699.
//
// A *Metrics is safe for concurrent use. A nil *Metrics is not valid; use
// New(prometheus.NewRegistry()) in tests.
package metrics
