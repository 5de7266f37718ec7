package storescope

import (
	"context"
	"sync/atomic"
)

// key is the context key of a call's scope.
type key struct{}

// scope is one call's mark.
type scope struct{ failed atomic.Bool }

// New returns ctx with a fresh scope for one call.
func New(ctx context.Context) context.Context {
	return context.WithValue(ctx, key{}, new(scope))
}

// Failed reports whether the shared store already failed the call of
// ctx's scope; false without a scope.
func Failed(ctx context.Context) bool {
	s, _ := ctx.Value(key{}).(*scope)
	return s != nil && s.failed.Load()
}

// Fail marks ctx's scope: the shared store failed its call. Without a
// scope it does nothing.
func Fail(ctx context.Context) {
	if s, _ := ctx.Value(key{}).(*scope); s != nil {
		s.failed.Store(true)
	}
}
