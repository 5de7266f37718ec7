package policy_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cpsguard/cpsguard/admission"
	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/internal/redistest"
	"github.com/cpsguard/cpsguard/policy"
)

// The buckets a call takes to a destination and a called number (issue 24,
// item 3), decided by every store as one call's: all or nothing over the
// peer's, the destination's and the number's repeat_dial bucket, which
// live in three Cluster slots; a priority call (admission.OverCount)
// counted past them.
func TestDestinationAndRepeatBucketsOnTheStores(t *testing.T) {
	cfg := &config.Config{
		Store:        config.Store{KeyPrefix: "t"},
		Peers:        []config.Peer{{Name: "p", CPS: 1000}},
		Destinations: []config.Destination{{Prefix: "+44", Windows: []config.Window{{Calls: 2, Per: time.Minute}}}},
		RepeatDial:   config.RepeatDial{Calls: 1, Per: time.Minute},
	}
	srv := redistest.Start(t)
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rc.Close() })
	cluster := redistest.StartCluster(t, 3, 0)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = cc.Close() })
	stores := map[string]func() admission.Store{
		"local": func() admission.Store { return admission.NewLocalStore(nil) },
		"redis": func() admission.Store {
			s := admission.NewRedisStore(rc, admission.RedisOptions{Timeout: 5 * time.Second})
			if err := s.Load(context.Background()); err != nil {
				t.Fatal(err)
			}
			return s
		},
		"redis-cluster": func() admission.Store {
			s := admission.NewRedisStore(cc, admission.RedisOptions{Timeout: 5 * time.Second})
			if err := s.Load(context.Background()); err != nil {
				t.Fatal(err)
			}
			return s
		},
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			cfg := *cfg
			cfg.Store.KeyPrefix = "t-" + name
			p := policy.New(&cfg)
			s := open()
			ctx := context.Background()
			pe := p.Peer(&cfg.Peers[0])
			bucketsTo := func(number string) []admission.Bucket {
				bs := slices.Clone(pe.Buckets(pe.CPS, 0))
				d := p.Destination(config.NormalizeNumber(number))
				if d == nil {
					t.Fatalf("no destination for %s", number)
				}
				bs = append(bs, d.Buckets(d.CPS, d.Burst)...)
				r, ok := p.RepeatDial(config.NormalizeNumber(number))
				if !ok {
					t.Fatal("no repeat_dial bucket")
				}
				return append(bs, r)
			}
			admit := func(member, number string, prio bool) admission.Decision {
				bs := bucketsTo(number)
				if prio {
					for i := range bs {
						bs[i].Over = admission.OverCount
					}
				}
				d, err := s.Admit(ctx, member, bs)
				if err != nil {
					t.Fatalf("%s to %s: %v", member, number, err)
				}
				return d
			}
			counts := func(number string) []int {
				c, err := s.Counts(ctx, bucketsTo(number))
				if err != nil {
					t.Fatal(err)
				}
				return c
			}
			if d := admit("m1", "+441111", false); !d.Admit {
				t.Fatalf("first call: %+v, want admitted", d)
			}
			// The same number again: refused by its repeat_dial bucket
			// (index 2), counted nowhere.
			if d := admit("m2", "441111", false); d.Admit || d.Refused != 2 {
				t.Fatalf("the number again: %+v, want refused by repeat_dial", d)
			}
			if got := counts("441111"); !slices.Equal(got, []int{1, 1, 1}) {
				t.Fatalf("counts after the refused repeat: %v, want [1 1 1]", got)
			}
			if d := admit("m3", "+44-2222", false); !d.Admit {
				t.Fatalf("another number of the destination: %+v, want admitted", d)
			}
			// The destination's window is full: refused (index 1), and the
			// number's own bucket is not counted.
			if d := admit("m4", "443333", false); d.Admit || d.Refused != 1 {
				t.Fatalf("a third number of +44: %+v, want refused by the destination", d)
			}
			if got := counts("443333"); !slices.Equal(got, []int{2, 2, 0}) {
				t.Fatalf("counts after the destination refused: %v, want [2 2 0]", got)
			}
			// A priority call to the full destination is counted past it.
			d := admit("m5", "443333", true)
			if !d.Admit || !slices.Equal(d.Over, []bool{false, true, false}) {
				t.Fatalf("a priority call: %+v, want admitted over the destination only", d)
			}
			if got := counts("443333"); !slices.Equal(got, []int{3, 3, 1}) {
				t.Fatalf("counts after the priority call: %v, want [3 3 1]", got)
			}
			for i := range 3 {
				if d := admit(fmt.Sprintf("prio-%d", i), "443333", true); !d.Admit {
					t.Fatalf("priority call %d to the same number: %+v, want admitted", i, d)
				}
			}
		})
	}
}
