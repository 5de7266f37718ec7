package limits

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Scopes of a limit: the one vocabulary of scope names. An override names
// one; the metrics' scope labels (metrics.ScopePeer, …), the refusal
// details and the logs use these constants. (Redis key scopes are
// policy.Scope, pinned apart on purpose: a label may be renamed, a key
// may not.)
const (
	ScopePeer     = "peer"
	ScopeCustomer = "customer"
	ScopeCarrier  = "carrier"
	// ScopeDestination is a destinations[] entry, named by its prefix as
	// configured (no override names one).
	ScopeDestination = "destination"
	// ScopeRepeatDial is repeat_dial (name ""): one bucket per called
	// number, which never becomes a label (no override names it).
	ScopeRepeatDial = "repeat_dial"
)

// MinTTL is the shortest an override may live: each node reads the pool's
// overrides every 250 ms, and one that ends before they all have seen it
// would apply on some nodes only.
const MinTTL = time.Second

// MaxTTL is the longest an override may live. An override is for an
// incident or a campaign; a lasting limit belongs in the configuration.
const MaxTTL = 30 * 24 * time.Hour

// ErrUnavailable reports a change the store could not make (Redis down).
var ErrUnavailable = errors.New("limits: override store unavailable")

// Override replaces the configured limits of one peer, customer or carrier
// until Until.
type Override struct {
	// Scope is ScopePeer, ScopeCustomer or ScopeCarrier; Name the
	// configured name.
	Scope string `json:"scope"`
	Name  string `json:"name"`
	// CPS replaces the configured cps (> 0).
	CPS float64 `json:"cps"`
	// Burst, when set, replaces a peer's or customer's configured burst (0:
	// no burst, the 1 s window); nil keeps the configured one.
	Burst *int `json:"burst,omitempty"`
	// max_calls has no override yet: one would go here as `MaxCalls *int`,
	// applied where sip reads the configured max_calls (sip/calls.go).

	// Until is when the override ends (by this node's clock; a store
	// reports the time left, so nodes' clocks need not agree).
	Until time.Time `json:"until"`
	// SetBy is who set it (the remote address of the API request); SetAt
	// when.
	SetBy string    `json:"set_by,omitempty"`
	SetAt time.Time `json:"set_at"`
}

// Field is the override's key in a store: "scope/name".
func (o Override) Field() string { return Field(o.Scope, o.Name) }

// Field returns the store key of the override of scope and name.
func Field(scope, name string) string { return scope + "/" + name }

// splitField is the inverse of Field.
func splitField(f string) (scope, name string, ok bool) {
	return strings.Cut(f, "/")
}

// ValidScope reports whether scope is one an override may have.
func ValidScope(scope string) bool {
	switch scope {
	case ScopePeer, ScopeCustomer, ScopeCarrier:
		return true
	}
	return false
}

// stored is what a store keeps of an override besides its field and
// expiry.
type stored struct {
	CPS   float64   `json:"cps"`
	Burst *int      `json:"burst,omitempty"`
	SetBy string    `json:"set_by,omitempty"`
	SetAt time.Time `json:"set_at"`
}

func encode(o Override) (string, error) {
	b, err := json.Marshal(stored{CPS: o.CPS, Burst: o.Burst, SetBy: o.SetBy, SetAt: o.SetAt.UTC()})
	if err != nil {
		return "", fmt.Errorf("limits: encode override %s: %w", o.Field(), err)
	}
	return string(b), nil
}

func decode(field, value string, until time.Time) (Override, error) {
	scope, name, ok := splitField(field)
	if !ok || !ValidScope(scope) || name == "" {
		return Override{}, fmt.Errorf("limits: override field %q is not scope/name", field)
	}
	var s stored
	if err := json.Unmarshal([]byte(value), &s); err != nil {
		return Override{}, fmt.Errorf("limits: decode override %s: %w", field, err)
	}
	if !(s.CPS > 0) {
		return Override{}, fmt.Errorf("limits: override %s has cps %v", field, s.CPS)
	}
	return Override{Scope: scope, Name: name, CPS: s.CPS, Burst: s.Burst, Until: until, SetBy: s.SetBy, SetAt: s.SetAt}, nil
}

// Store keeps the overrides of a pool (RedisStore) or of one node
// (LocalStore).
type Store interface {
	// Set stores o (its Until is ignored) for ttl and returns the live
	// override it replaced, if any, with its Until.
	Set(ctx context.Context, o Override, ttl time.Duration) (prev *Override, err error)
	// Delete ends the override of scope and name and returns it; nil when
	// there was none live.
	Delete(ctx context.Context, scope, name string) (prev *Override, err error)
	// List returns every live override.
	List(ctx context.Context) ([]Override, error)
}
