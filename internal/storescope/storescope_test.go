package storescope

import (
	"context"
	"testing"
)

// A scope is marked once failed, for every context derived from the
// call's; a context without one is never marked.
func TestScope(t *testing.T) {
	bare := context.Background()
	Fail(bare)
	if Failed(bare) {
		t.Fatal("a context without a scope was marked")
	}
	call := New(bare)
	if Failed(call) {
		t.Fatal("a fresh scope is marked")
	}
	child, cancel := context.WithCancel(call)
	defer cancel()
	Fail(child)
	if !Failed(call) || !Failed(child) {
		t.Fatal("a failure in a derived context did not mark the call's scope")
	}
	if Failed(New(bare)) {
		t.Fatal("another call's scope is marked")
	}
}
