package lua

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/cpsguard/cpsguard/internal/redistest"
)

// TestVariantIsTheNodesOwn: SetVariant gives the scripts a SHA1 of their
// own, which Load loads and the calls run; after a Redis restart the node
// meets NOSCRIPT for its variant even when a node of another variant has
// put the plain scripts back (its EVAL), and so learns Redis forgot.
func TestVariantIsTheNodesOwn(t *testing.T) {
	plain := SHA(ScriptAdmit)
	t.Cleanup(func() {
		variant = ""
		for _, s := range allScripts {
			*s.script = redis.NewScript(s.src)
		}
	})
	a, b := "node-a", "node-c" // fnv32a: different variants
	SetVariant(a)
	va := SHA(ScriptAdmit)
	SetVariant(b)
	vb := SHA(ScriptAdmit)
	if va == plain || vb == plain || va == vb {
		t.Fatalf("SHA1 of admit.lua: plain %s, %s %s, %s %s: want three", plain, a, va, b, vb)
	}
	SetVariant(a)
	if got := SHA(ScriptAdmit); got != va {
		t.Fatalf("variant of %s: %s then %s", a, va, got)
	}

	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	if err := Load(ctx, c); err != nil {
		t.Fatal(err)
	}
	if ok, err := c.ScriptExists(ctx, va).Result(); err != nil || !ok[0] {
		t.Fatalf("variant %s not loaded: %v %v", va, ok, err)
	}
	bucket := []AdmitBucket{{Key: Key("v", "peer", "a"), Limit: 5, WindowUS: 1_000_000}}
	var lost int
	p := NewPipeliner(c, PipelineOptions{OnNoScript: func() { lost++ }})
	t.Cleanup(func() { _ = p.Close() })
	if _, err := Admit(ctx, p, "m1", bucket); err != nil || lost != 0 {
		t.Fatalf("admit with the variant loaded: %v, %d NOSCRIPT", err, lost)
	}
	srv.Forget(t)
	// Another node's variant runs first and puts its own text back.
	SetVariant(b)
	if _, err := Admit(ctx, p, "m2", bucket); err != nil || lost != 1 {
		t.Fatalf("other node's first admit after the restart: %v, %d NOSCRIPT, want 1", err, lost)
	}
	SetVariant(a)
	if _, err := Admit(ctx, p, "m3", bucket); err != nil || lost != 2 {
		t.Fatalf("this node's first admit after the restart: %v, %d NOSCRIPT, want 2 (its variant is its own)", err, lost)
	}
}
