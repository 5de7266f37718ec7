package calls

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// Defaults of TrackerOptions.
const (
	// DefaultTTL is how long a place lives unless refreshed: the bound on
	// how long the calls of a node that died keep their places.
	DefaultTTL = 60 * time.Second
	// DefaultMaxDuration caps how long a call holds its places.
	DefaultMaxDuration = 4 * time.Hour
	// refreshBatch is the most members one refresh script call names.
	refreshBatch = 500
	// endTimeout bounds the store call that frees a call's places; it runs
	// even when the call's own context is done.
	endTimeout = time.Second
)

// TrackerOptions configures a Tracker.
type TrackerOptions struct {
	// TTL is how long a place lives unless refreshed (default DefaultTTL);
	// the refresher runs every TTL/3.
	TTL time.Duration
	// MaxDuration caps a call: its places are freed that long after it
	// took the first one (default DefaultMaxDuration).
	MaxDuration time.Duration
	// Now is the clock of MaxDuration (default time.Now).
	Now func() time.Time
	// OnError is told of every failed Free and Refresh (metrics); nil
	// ignores them: the places then expire with the TTL.
	OnError func(op string, err error)
	Logger  *slog.Logger
}

// live is one call this node set up that holds places.
type live struct {
	keys   []string
	start  time.Time
	dialog string // "" until the call is forwarded (Bind)
	// callee is the callee's tag of the answer (Answer): a BYE ends the
	// call only when it names this tag, so a BYE with a made-up tag (which
	// the carrier refuses, 481, the call going on) frees nothing.
	callee string
	// pendingEnd is the callee's tag of a BYE that came before the answer
	// was recorded (a carrier's BYE racing its own 2xx): the matching
	// Answer ends the call.
	pendingEnd string
}

// Tracker holds the places of the calls this node set up: it takes them
// (Occupy), frees them at the call's end (End, EndDialog, Release), and
// keeps them alive while the call lives (Run). It keeps state only for the
// calls it placed, each removed at the call's end or at MaxDuration.
//
// A Tracker is safe for concurrent use.
type Tracker struct {
	store Store
	o     TrackerOptions

	mu      sync.Mutex
	calls   map[string]*live    // member -> call
	dialogs map[string][]string // dialog id -> members, oldest first

	kick chan struct{} // Kick asks Run for a refresh round now
}

// NewTracker returns a Tracker on store.
func NewTracker(store Store, o TrackerOptions) *Tracker {
	if o.TTL <= 0 {
		o.TTL = DefaultTTL
	}
	if o.MaxDuration <= 0 {
		o.MaxDuration = DefaultMaxDuration
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Tracker{store: store, o: o, calls: make(map[string]*live), dialogs: make(map[string][]string), kick: make(chan struct{}, 1)}
}

// TTL is the time a dead node's calls keep their places at most.
func (t *Tracker) TTL() time.Duration { return t.o.TTL }

// Occupy takes member's places in every Place, all or none (Store.Occupy),
// and remembers them so End frees them. Places a call already holds may be
// added to (the carrier's, once the call is routed). A duplicate (the call
// is live already) adds nothing here.
func (t *Tracker) Occupy(ctx context.Context, member string, places []Place) (Decision, error) {
	d, err := t.store.Occupy(ctx, member, t.o.TTL, places)
	if err != nil || !d.Admit || d.Duplicate {
		return d, err
	}
	t.mu.Lock()
	c := t.calls[member]
	if c == nil {
		c = &live{start: t.o.Now()}
		t.calls[member] = c
	}
	for _, p := range places {
		if !slices.Contains(c.keys, p.Key) {
			c.keys = append(c.keys, p.Key)
		}
	}
	t.mu.Unlock()
	return d, nil
}

// Release frees some of member's places (a carrier the call leaves for the
// next one) and keeps the others.
func (t *Tracker) Release(ctx context.Context, member string, keys []string) {
	t.mu.Lock()
	c := t.calls[member]
	var free []string
	if c != nil {
		for _, k := range keys {
			if i := slices.Index(c.keys, k); i >= 0 {
				c.keys = slices.Delete(c.keys, i, i+1)
				free = append(free, k)
			}
		}
	}
	t.mu.Unlock()
	t.free(ctx, member, free)
}

// Bind binds a live call to its dialog (Call-ID and the caller's From
// tag), so a BYE that passed the dialog token check can end it. The proxy
// binds a call when it forwards it: the dialog is known then, and a BYE
// that races the call's 2xx still finds it. Binding twice keeps the first.
func (t *Tracker) Bind(member, dialog string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.calls[member]
	if c == nil || c.dialog != "" {
		return
	}
	c.dialog = dialog
	t.dialogs[dialog] = append(t.dialogs[dialog], member)
}

// End frees every place of member and forgets it. Ending a call that holds
// nothing (never placed, or ended already) does nothing.
func (t *Tracker) End(ctx context.Context, member string) {
	t.mu.Lock()
	c := t.forget(member)
	t.mu.Unlock()
	if c != nil {
		t.free(ctx, member, c.keys)
	}
}

// Answer records the callee's tag of member's answer (its 2xx): from now
// on a BYE ends the call only when it names that tag. When a BYE with that
// tag came first, the call ends now and Answer reports true.
func (t *Tracker) Answer(ctx context.Context, member, calleeTag string) bool {
	t.mu.Lock()
	c := t.calls[member]
	if c == nil {
		t.mu.Unlock()
		return false
	}
	c.callee = calleeTag
	if c.pendingEnd == "" || c.pendingEnd != calleeTag {
		t.mu.Unlock()
		return false
	}
	c = t.forget(member)
	t.mu.Unlock()
	t.free(ctx, member, c.keys)
	return true
}

// EndDialog ends the live call of dialog whose answer named calleeTag (a
// verified BYE: its Call-ID, caller's tag and peer leg make dialog, its
// other tag is the callee's) and reports whether there was one. A BYE for
// a call this node does not hold, or naming another callee tag, frees
// nothing; one that comes before the call's answer was recorded is kept
// as a pending end that the matching Answer carries out.
func (t *Tracker) EndDialog(ctx context.Context, dialog, calleeTag string) bool {
	if calleeTag == "" {
		return false
	}
	t.mu.Lock()
	var member string
	for _, m := range t.dialogs[dialog] {
		c := t.calls[m]
		switch {
		case c == nil:
		case c.callee == calleeTag:
			member = m
		case c.callee == "" && c.pendingEnd == "":
			c.pendingEnd = calleeTag
		}
		if member != "" {
			break
		}
	}
	if member == "" {
		t.mu.Unlock()
		return false
	}
	c := t.forget(member)
	t.mu.Unlock()
	if c != nil {
		t.free(ctx, member, c.keys)
	}
	return true
}

// forget removes member's state; t.mu must be held.
func (t *Tracker) forget(member string) *live {
	c := t.calls[member]
	if c == nil {
		return nil
	}
	delete(t.calls, member)
	if c.dialog != "" {
		ms := slices.DeleteFunc(t.dialogs[c.dialog], func(m string) bool { return m == member })
		if len(ms) == 0 {
			delete(t.dialogs, c.dialog)
		} else {
			t.dialogs[c.dialog] = ms
		}
	}
	return c
}

func (t *Tracker) free(ctx context.Context, member string, keys []string) {
	if len(keys) == 0 {
		return
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), endTimeout)
	defer cancel()
	if _, err := t.store.Free(fctx, member, keys); err != nil {
		t.o.Logger.Debug("freeing call places failed; they expire with the ttl", "member", member, "error", err)
		if t.o.OnError != nil {
			t.o.OnError("free", err)
		}
	}
}

// Live returns the number of calls this node holds places for.
func (t *Tracker) Live() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.calls)
}

// Run refreshes the places of the live calls every TTL/3, and at once
// after Kick, until ctx is done, and ends the calls older than MaxDuration.
func (t *Tracker) Run(ctx context.Context) {
	tick := time.NewTicker(t.o.TTL / 3)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			t.Refresh(ctx)
		case <-t.kick:
			t.Refresh(ctx)
			tick.Reset(t.o.TTL / 3)
		}
	}
}

// Kick asks Run for a refresh round now, without waiting for it: the node
// calls it when the shared store is back in use, so the places its live
// calls took in the fallback (or the store lost) count in the pool again
// within one round trip instead of one refresh period. It never blocks;
// kicks while one is pending are one.
func (t *Tracker) Kick() {
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// Refresh runs one refresh round: calls past MaxDuration are ended, the
// places of the others extended by TTL, one script call per place (and
// per refreshBatch members). A place missing from the store is added
// back (Store.Refresh): the call lives, so the limit must count it. A
// call that ended while its place was being refreshed is freed again
// there, so a refresh racing a call's end never leaves its place behind.
func (t *Tracker) Refresh(ctx context.Context) {
	now := t.o.Now()
	byKey := make(map[string][]string)
	var expired []string
	t.mu.Lock()
	for m, c := range t.calls {
		if now.Sub(c.start) >= t.o.MaxDuration {
			expired = append(expired, m)
			continue
		}
		for _, k := range c.keys {
			byKey[k] = append(byKey[k], m)
		}
	}
	t.mu.Unlock()
	for _, m := range expired {
		t.o.Logger.Debug("call reached max_call_duration; places freed", "member", m)
		t.End(ctx, m)
	}
	for k, ms := range byKey {
		for len(ms) > 0 {
			n := min(len(ms), refreshBatch)
			rctx, cancel := context.WithTimeout(ctx, t.o.TTL/3)
			restored, err := t.store.Refresh(rctx, k, t.o.TTL, ms[:n])
			cancel()
			if err != nil {
				t.o.Logger.Debug("refreshing call places failed", "key", k, "error", err)
				if t.o.OnError != nil {
					t.o.OnError("refresh", err)
				}
			}
			if restored > 0 {
				t.o.Logger.Info("live calls' places were missing from the store and are counted again", "key", k, "calls", restored)
			}
			for _, m := range t.gone(k, ms[:n]) {
				t.free(ctx, m, []string{k})
			}
			ms = ms[n:]
		}
	}
}

// gone returns the members of ms that no longer hold key k (their call
// ended, or left the carrier of k, since the refresh round began).
func (t *Tracker) gone(k string, ms []string) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for _, m := range ms {
		if c := t.calls[m]; c == nil || !slices.Contains(c.keys, k) {
			out = append(out, m)
		}
	}
	return out
}
