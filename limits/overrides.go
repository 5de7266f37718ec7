package limits

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cpsguard/cpsguard/internal/panics"
)

// DefaultRefresh is how often Overrides reads the store by default: a
// change made on another node applies here within it.
const DefaultRefresh = 250 * time.Millisecond

// Options configure Overrides.
type Options struct {
	// Refresh is the period of Run's store reads; 0: DefaultRefresh.
	Refresh time.Duration
	// Clock decides expiry; nil: time.Now.
	Clock func() time.Time
	// OnChange is called after the set of live overrides changed (a change
	// here or on another node, an expiry), with the new list. Calls are
	// serialised under the view's lock: OnChange may call Lookup and List,
	// not Set, Delete or Refresh. Nil: nobody.
	OnChange func([]Override)
	// Logger receives failed refreshes (Warn once per outage) and expiries
	// (Info). Nil: discarded.
	Logger *slog.Logger
	// Panics logs and counts a panic in a background refresh, which then
	// counts as a failed one (the next tick tries again). Nil: logs only.
	Panics *panics.Reporter
}

// target is the scope and name an override applies to (a map key that
// needs no string built per lookup).
type target struct{ scope, name string }

func targetOf(o Override) target { return target{o.Scope, o.Name} }

// Overrides is a node's view of the overrides of its Store: a snapshot
// refreshed in the background, read by Lookup without I/O. It is safe for
// concurrent use.
type Overrides struct {
	store Store
	o     Options

	snap atomic.Pointer[map[target]Override]
	// gen counts local changes: a refresh that read the store before one
	// does not overwrite it.
	gen atomic.Uint64

	mu      sync.Mutex // serialises snapshot swaps and OnChange
	last    []Override // what OnChange was last told
	failing bool
}

// New returns the view of store. Call Run to keep it fresh (and Refresh
// once first to start with the pool's overrides).
func New(store Store, o Options) *Overrides {
	if o.Refresh <= 0 {
		o.Refresh = DefaultRefresh
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	x := &Overrides{store: store, o: o}
	empty := map[target]Override{}
	x.snap.Store(&empty)
	return x
}

// Lookup returns the live override of scope and name, if any. It reads the
// snapshot only; an override whose Until has passed is not returned even
// before the next refresh drops it.
func (x *Overrides) Lookup(scope, name string) (Override, bool) {
	if x == nil {
		return Override{}, false
	}
	o, ok := (*x.snap.Load())[target{scope, name}] // no allocation on the call path
	if !ok || !x.o.Clock().Before(o.Until) {
		return Override{}, false
	}
	return o, true
}

// List returns the live overrides of the snapshot, by expiry.
func (x *Overrides) List() []Override {
	now := x.o.Clock()
	m := *x.snap.Load()
	out := make([]Override, 0, len(m))
	for _, o := range m {
		if now.Before(o.Until) {
			out = append(out, o)
		}
	}
	sortOverrides(out)
	return out
}

// Set stores o for ttl in the store and applies it on this node at once. It
// returns the override it replaced (nil: none).
func (x *Overrides) Set(ctx context.Context, o Override, ttl time.Duration) (*Override, error) {
	prev, err := x.store.Set(ctx, o, ttl)
	if err != nil {
		return nil, err
	}
	o.Until = x.o.Clock().Add(ttl)
	x.apply(func(m map[target]Override) { m[targetOf(o)] = o })
	return prev, nil
}

// Delete ends the override of scope and name in the store and on this node
// at once. It returns the override it ended (nil: there was none).
func (x *Overrides) Delete(ctx context.Context, scope, name string) (*Override, error) {
	prev, err := x.store.Delete(ctx, scope, name)
	if err != nil {
		return nil, err
	}
	x.apply(func(m map[target]Override) { delete(m, target{scope, name}) })
	return prev, nil
}

// apply changes a copy of the snapshot and swaps it in.
func (x *Overrides) apply(change func(map[target]Override)) {
	x.mu.Lock()
	x.gen.Add(1)
	old := *x.snap.Load()
	m := make(map[target]Override, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	change(m)
	x.snap.Store(&m)
	x.mu.Unlock()
	x.changed()
}

// Refresh reads the store into the snapshot. On error the snapshot stays
// (its overrides still end at their expiry) and the error is returned.
func (x *Overrides) Refresh(ctx context.Context) error {
	gen := x.gen.Load()
	list, err := x.store.List(ctx)
	x.mu.Lock()
	if err != nil {
		if !x.failing {
			x.o.Logger.Warn("limit overrides: store read failed, keeping the last ones read", "error", err.Error())
		}
		x.failing = true
		x.mu.Unlock()
		x.changed() // an expiry is still a change
		return err
	}
	if x.failing {
		x.o.Logger.Info("limit overrides: store read again")
	}
	x.failing = false
	if x.gen.Load() == gen {
		m := make(map[target]Override, len(list))
		for _, o := range list {
			m[targetOf(o)] = o
		}
		x.snap.Store(&m)
	}
	x.mu.Unlock()
	x.changed()
	return nil
}

// changed tells OnChange when the live overrides differ from what it was
// last told, and logs the overrides that ended meanwhile.
func (x *Overrides) changed() {
	x.mu.Lock()
	defer x.mu.Unlock()
	now := x.List()
	if same(now, x.last) {
		return
	}
	live := make(map[string]bool, len(now))
	for _, o := range now {
		live[o.Field()] = true
	}
	for _, o := range x.last {
		if !live[o.Field()] && !x.o.Clock().Before(o.Until) {
			x.o.Logger.Info("limit override expired", "scope", o.Scope, "name", o.Name, "cps", o.CPS,
				"until", o.Until.UTC().Format(time.RFC3339))
		}
	}
	x.last = now
	if x.o.OnChange != nil {
		x.o.OnChange(now)
	}
}

func same(a, b []Override) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Field() != b[i].Field() || a[i].CPS != b[i].CPS || !sameBurst(a[i].Burst, b[i].Burst) {
			return false
		}
	}
	return true
}

func sameBurst(a, b *int) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// Run refreshes the snapshot every Options.Refresh until ctx ends.
func (x *Overrides) Run(ctx context.Context) {
	t := time.NewTicker(x.o.Refresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		x.refreshSafe(ctx)
	}
}

// refreshSafe is one background Refresh: failures are logged once per
// outage by Refresh, a panic by Options.Panics.
func (x *Overrides) refreshSafe(ctx context.Context) {
	defer x.o.Panics.Recover("limits.refresh", nil)
	_ = x.Refresh(ctx)
}
