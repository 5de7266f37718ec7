// Package limits owns the pool's live limit overrides: an operator's
// "peer dialer-1 at 20 cps for the next hour" (PUT /api/v1/limits), which
// replaces a configured peer's or customer's cps (and burst) or a carrier's
// cps on every node until its TTL ends or it is deleted.
//
// A Store keeps the overrides: RedisStore in the shared Redis (one hash and
// one expiry set, through lua.SetOverride and friends, expiring with the
// latest override so none outlives its TTL even with no node up), LocalStore
// in the process for a single node. Overrides holds a node's view: a
// background refresh (Run, every 250 ms by default) reads the store into an
// atomic snapshot that the call path reads without I/O (Lookup), and a change
// made through Overrides applies on that node at once.
//
// Failure: a refresh that fails (Redis down) keeps the last overrides read,
// so the node goes on applying them; each still ends at its own expiry,
// checked against the node's clock on every Lookup. Set and Delete return
// the store's error: a change that could not reach the pool is not applied
// anywhere.
//
// Overrides are independent of the configuration: a reload does not drop
// them. An override of a name the configuration no longer has is kept but
// ignored (the proxy only looks up configured names).
//
// Everything here is safe for concurrent use.
package limits
