package carriers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cpsguard/cpsguard/lua"
	"github.com/cpsguard/cpsguard/policy"
)

// Out of service by hand: an operator takes a carrier out of service for
// the whole pool (PUT /api/v1/carriers/{name}/service, `cpsguard carrier
// out NAME`) and puts it back (DELETE, `cpsguard carrier in NAME`). While
// it is out every node skips it at once (reroute reason out_of_service)
// and a route whose carriers are all out (or down) refuses its calls
// before admission. Its probes go on, so status still says whether it is
// up. The mark lives in the store (ServiceStore: the pool's Redis, or the
// process), until it is removed; each node reads it every RefreshEvery
// and learns its own changes at once.

// Out is a carrier taken out of service by hand.
type Out struct {
	// Carrier is the carrier's configured name.
	Carrier string `json:"carrier"`
	// Reason is what the operator said (may be empty).
	Reason string `json:"reason,omitempty"`
	// By is who took it out (the API request's remote address).
	By string `json:"by,omitempty"`
	// Since is when (the taking node's clock).
	Since time.Time `json:"since"`
}

// ErrServiceUnavailable reports a change of service the store could not
// make (Redis down): nothing changed anywhere.
var ErrServiceUnavailable = errors.New("carriers: service store unavailable")

// ServiceStore keeps the carriers taken out of service by hand, for the
// pool. RedisService and LocalService satisfy it, and decide alike
// (service_test.go runs one suite on both).
type ServiceStore interface {
	// TakeOut marks o.Carrier out of service and returns the mark it
	// replaced (nil: the carrier was in service).
	TakeOut(ctx context.Context, o Out) (*Out, error)
	// PutBack removes name's mark and returns it (nil: the carrier was
	// in service).
	PutBack(ctx context.Context, name string) (*Out, error)
	// List returns every carrier out of service, by name.
	List(ctx context.Context) ([]Out, error)
}

var (
	_ ServiceStore = (*RedisService)(nil)
	_ ServiceStore = (*LocalService)(nil)
)

// LocalService keeps the marks in this process (one node). Safe for
// concurrent use.
type LocalService struct {
	mu  sync.Mutex
	out map[string]Out
}

// NewLocalService returns an empty LocalService.
func NewLocalService() *LocalService { return &LocalService{out: map[string]Out{}} }

// TakeOut implements ServiceStore.
func (l *LocalService) TakeOut(_ context.Context, o Out) (*Out, error) {
	if o.Carrier == "" {
		return nil, errors.New("carriers: take out: no carrier name")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	prev, ok := l.out[o.Carrier]
	l.out[o.Carrier] = o
	if !ok {
		return nil, nil
	}
	return &prev, nil
}

// PutBack implements ServiceStore.
func (l *LocalService) PutBack(_ context.Context, name string) (*Out, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	prev, ok := l.out[name]
	if !ok {
		return nil, nil
	}
	delete(l.out, name)
	return &prev, nil
}

// List implements ServiceStore.
func (l *LocalService) List(context.Context) ([]Out, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := slices.Collect(maps.Values(l.out))
	sortOuts(out)
	return out, nil
}

func sortOuts(out []Out) {
	slices.SortFunc(out, func(a, b Out) int { return strings.Compare(a.Carrier, b.Carrier) })
}

// RedisService keeps the marks in the pool's Redis (service.lua, one
// hash), so every node reads the same ones. Safe for concurrent use.
type RedisService struct {
	client  redis.Scripter
	key     string
	timeout time.Duration
	observe func(script string, d time.Duration, err error)
}

// NewRedisService keeps the marks under key prefix (store.key_prefix)
// through client; timeout bounds one script run (0: the caller's context
// only), observe is told of each (metrics; nil: nobody).
func NewRedisService(client redis.Scripter, prefix string, timeout time.Duration, observe func(script string, d time.Duration, err error)) *RedisService {
	return &RedisService{client: client, key: policy.ServiceKey(prefix), timeout: timeout, observe: observe}
}

func (r *RedisService) run(ctx context.Context, fn func(ctx context.Context) ([]lua.ServiceEntry, error)) ([]Out, error) {
	if r.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.timeout)
		defer cancel()
	}
	start := time.Now()
	es, err := fn(ctx)
	if r.observe != nil {
		r.observe(lua.ScriptService, time.Since(start), err)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrServiceUnavailable, err)
	}
	out := make([]Out, 0, len(es))
	for _, e := range es {
		var o Out
		if err := json.Unmarshal([]byte(e.Value), &o); err != nil {
			continue // not one of ours (or a newer encoding): skip it
		}
		o.Carrier = e.Carrier
		out = append(out, o)
	}
	sortOuts(out)
	return out, nil
}

func oneOut(os []Out, err error) (*Out, error) {
	if err != nil || len(os) == 0 {
		return nil, err
	}
	return &os[0], nil
}

// TakeOut implements ServiceStore.
func (r *RedisService) TakeOut(ctx context.Context, o Out) (*Out, error) {
	v, err := json.Marshal(Out{Reason: o.Reason, By: o.By, Since: o.Since.UTC()})
	if err != nil {
		return nil, err
	}
	return oneOut(r.run(ctx, func(ctx context.Context) ([]lua.ServiceEntry, error) {
		e, err := lua.TakeOut(ctx, r.client, r.key, o.Carrier, string(v))
		if e == nil {
			return nil, err
		}
		return []lua.ServiceEntry{*e}, err
	}))
}

// PutBack implements ServiceStore.
func (r *RedisService) PutBack(ctx context.Context, name string) (*Out, error) {
	return oneOut(r.run(ctx, func(ctx context.Context) ([]lua.ServiceEntry, error) {
		e, err := lua.PutBack(ctx, r.client, r.key, name)
		if e == nil {
			return nil, err
		}
		return []lua.ServiceEntry{*e}, err
	}))
}

// List implements ServiceStore.
func (r *RedisService) List(ctx context.Context) ([]Out, error) {
	return r.run(ctx, func(ctx context.Context) ([]lua.ServiceEntry, error) {
		return lua.ListOut(ctx, r.client, r.key)
	})
}

// outView is a node's view of the pool's marks: read every RefreshEvery,
// changed at once by this node's own changes. A failed read keeps the
// last view.
type outView struct {
	mu  sync.RWMutex
	out map[string]Out
	// changed is when this node last changed a mark itself: a read of
	// the store begun before it is stale.
	changed time.Time
}

func (v *outView) get(name string) (Out, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	o, ok := v.out[name]
	return o, ok
}

// set replaces the view with outs, read from the store from begun on,
// and returns the carriers whose mark came or went; a read begun before
// this node's last own change is dropped.
func (v *outView) set(outs []Out, begun time.Time) (changed []string) {
	next := make(map[string]Out, len(outs))
	for _, o := range outs {
		next[o.Carrier] = o
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if begun.Before(v.changed) {
		return nil
	}
	for name := range next {
		if _, ok := v.out[name]; !ok {
			changed = append(changed, name)
		}
	}
	for name := range v.out {
		if _, ok := next[name]; !ok {
			changed = append(changed, name)
		}
	}
	v.out = next
	return changed
}

// put records o (out) or removes name's mark (o nil), and reports
// whether that changed the view.
func (v *outView) put(name string, o *Out) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.changed = time.Now()
	_, had := v.out[name]
	if v.out == nil {
		v.out = map[string]Out{}
	}
	if o == nil {
		delete(v.out, name)
		return had
	}
	v.out[name] = *o
	return !had
}

// TakeOut takes the carrier named name out of service for the pool (by:
// who; reason: why, may be empty): every node skips it, this one at once,
// the others within RefreshEvery. It returns the mark it replaced (nil:
// the carrier was in service); ok is false for a carrier not configured.
// An error is the store's: nothing changed.
func (s *Set) TakeOut(ctx context.Context, name, by, reason string) (prev *Out, ok bool, err error) {
	if _, car := s.carrier(name); car == nil {
		return nil, false, nil
	}
	o := Out{Carrier: name, Reason: reason, By: by, Since: s.clock()}
	prev, err = s.service.TakeOut(ctx, o)
	if err != nil {
		return nil, true, err
	}
	if s.out.put(name, &o) {
		s.serviceChanged(name)
	}
	return prev, true, nil
}

// PutBack puts the carrier named name back in service for the pool: this
// node sends calls to it at once, the others within RefreshEvery. It
// returns the mark it removed (nil: the carrier was in service); ok is
// false for a carrier not configured. An error is the store's: nothing
// changed.
func (s *Set) PutBack(ctx context.Context, name string) (prev *Out, ok bool, err error) {
	if _, car := s.carrier(name); car == nil {
		return nil, false, nil
	}
	prev, err = s.service.PutBack(ctx, name)
	if err != nil {
		return nil, true, err
	}
	if s.out.put(name, nil) {
		s.serviceChanged(name)
	}
	return prev, true, nil
}

// refreshService reads the pool's marks (a failed read keeps the last).
func (s *Set) refreshService(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, storeBudget)
	defer cancel()
	begun := time.Now()
	outs, err := s.service.List(ctx)
	if err != nil {
		return
	}
	for _, name := range s.out.set(outs, begun) {
		s.serviceChanged(name)
	}
}

// serviceChanged logs a carrier's mark coming or going, as this node
// learnt it, and sets cpsguard_carrier_in_service.
func (s *Set) serviceChanged(name string) {
	if o, out := s.out.get(name); out {
		s.log.Warn("carrier out of service: calls skip it until an operator puts it back", "carrier", name, "by", o.By, "reason", o.Reason)
	} else {
		s.log.Info("carrier back in service: calls go to it again", "carrier", name)
	}
	s.setInService(name)
}
