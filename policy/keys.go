package policy

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/cpsguard/cpsguard/lua"
)

// Scope is the kind of thing a Redis key belongs to. Its value is part of
// every key of that kind in a running pool: changing one moves every
// pool's state of that scope to new, empty keys. keys_test.go pins them.
type Scope string

// Key scopes. They are distinct from metrics' label constants on purpose:
// a label may be renamed, a key scope may not.
const (
	// ScopePeer is a peer's admission bucket.
	ScopePeer Scope = "peer"
	// ScopeCustomer is a customer's admission bucket.
	ScopeCustomer Scope = "customer"
	// ScopeCarrier is a carrier's slot set (pacing), with its pause,
	// overload evidence and adaptive rate keys beside it.
	ScopeCarrier Scope = "carrier"
	// ScopeDialog is the re-INVITE bucket of one dialog.
	ScopeDialog Scope = "dialog"
	// ScopeNodes is the pool's node set (heartbeats).
	ScopeNodes Scope = "nodes"
	// ScopeOverrides is the pool's hash of live limit overrides.
	ScopeOverrides Scope = "overrides"
	// ScopeEnded is the pool's set of dialogs that ended.
	ScopeEnded Scope = "ended"
	// ScopeLive is the pool's registry of live calls (GET /api/v1/calls)
	// and the nodes' queues of calls to end.
	ScopeLive Scope = "live"
	// ScopeDestination is a destination's admission bucket (and max_calls
	// place), named by its prefix without a leading '+'.
	ScopeDestination Scope = "destination"
	// ScopeRepeat is the repeat_dial bucket of one called number, named
	// by a hash of it (RepeatKey), never the number.
	ScopeRepeat Scope = "repeat"
	// ScopeService is the pool's hash of carriers taken out of service by
	// hand.
	ScopeService Scope = "service"
)

// callsScope prefixes the scope of a max_calls place, giving it a hash tag
// of its own beside the admission bucket's.
const callsScope = "calls:"

// allName names the one key of a pool-wide scope (nodes, overrides).
const allName = "all"

// Key is the Redis key of scope's name under prefix (store.key_prefix):
// Key("cpsguard", ScopePeer, "dialer-1") = "cpsguard:{peer:dialer-1}".
func Key(prefix string, scope Scope, name string) string {
	return lua.Key(prefix, string(scope), name)
}

// CallsKey is the key of the max_calls place of a peer, customer or
// carrier: CallsKey("cpsguard", ScopePeer, "dialer-1") =
// "cpsguard:{calls:peer:dialer-1}".
func CallsKey(prefix string, scope Scope, name string) string {
	return lua.Key(prefix, callsScope+string(scope), name)
}

// RepeatKey is the key of the repeat_dial bucket of a called number (as
// config.DestinationNumber gives it): "cpsguard:{repeat:<hash>}", the hash
// the first 12 bytes of SHA-256 of the number in hex, so a key neither
// shows the number nor grows with it. (A hash of a phone number is easily
// reversed by trying numbers: it keeps numbers out of sight, not secret.)
func RepeatKey(prefix, number string) string {
	sum := sha256.Sum256([]byte(number))
	return Key(prefix, ScopeRepeat, hex.EncodeToString(sum[:12]))
}

// DialogKey is the key of the re-INVITE bucket of the dialog named id (a
// hash, never a header value): "cpsguard:{dialog:<id>}".
func DialogKey(prefix, id string) string { return Key(prefix, ScopeDialog, id) }

// NodesKey is the key of the pool's node set: "cpsguard:{nodes:all}".
func NodesKey(prefix string) string { return Key(prefix, ScopeNodes, allName) }

// EndedDialogsKey is the key of the pool's set of ended dialogs (the
// dialog tokens they made dead): "cpsguard:{ended:dialogs}".
func EndedDialogsKey(prefix string) string { return Key(prefix, ScopeEnded, "dialogs") }

// OverridesKey is the key of the pool's limit overrides (the limits
// store's hash): "cpsguard:{overrides:all}". Its hash tag holds every
// override, so one script sees them all on a Cluster.
func OverridesKey(prefix string) string { return Key(prefix, ScopeOverrides, allName) }

// LiveKey is the key of the pool's live calls (the registry's hash):
// "cpsguard:{live:all}". Its hash tag holds every entry and every node's
// end queue, so one script sees them all on a Cluster.
func LiveKey(prefix string) string { return Key(prefix, ScopeLive, allName) }

// LiveEndKey is the queue of Call-IDs node is asked to end (DELETE
// /api/v1/calls received by another node): "cpsguard:{live:all}:end:NODE".
func LiveEndKey(prefix, node string) string { return LiveKey(prefix) + ":end:" + node }

// ServiceKey is the key of the pool's carriers taken out of service by
// hand (a hash by carrier name): "cpsguard:{service:all}".
func ServiceKey(prefix string) string { return Key(prefix, ScopeService, allName) }
