package lua

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cpsguard/cpsguard/internal/redistest"
)

// BenchmarkAdmitPaceScript prices admit_pace's own work in redis-server
// (issue 23): the usec_per_call of EVALSHA in INFO commandstats, without
// the requests' I/O. Calls arrive one at a time at rate per second (a
// ticker) for a peer and a customer window of 1 s, so each window holds
// about rate members as at rate CPS, and each call trims about one; every
// call is admitted and takes a slot of one carrier (interval 50 µs: no
// wait), first come, first served ("none") or shared among 4 customers
// ("share"). A warm-up second fills the windows before the stats are
// reset. Reported per op: script-µs/op (the evalsha usec_per_call) and
// members (the peer window's size at the end).
//
//	go test ./lua/ -run '^$' -bench AdmitPaceScript -benchtime 5000x -count 3
func BenchmarkAdmitPaceScript(b *testing.B) {
	for _, rate := range []int{1000, 5000} {
		for _, share := range []string{"none", "share"} {
			b.Run(fmt.Sprintf("cps=%d/%s", rate, share), func(b *testing.B) {
				benchAdmitPace(b, rate, share == "share")
			})
		}
	}
}

func benchAdmitPace(b *testing.B, rate int, shared bool) {
	srv := redistest.Start(b)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	defer c.Close()
	ctx := context.Background()
	if err := Load(ctx, c); err != nil {
		b.Fatal(err)
	}
	peer := AdmitBucket{Key: Key("bench", "peer", "p"), Limit: 1 << 20, WindowUS: 1_000_000}
	cust := AdmitBucket{Key: Key("bench", "customer", "c"), Limit: 1 << 20, WindowUS: 1_000_000}
	slots := Key("bench", "carrier", "k")
	seq := 0
	call := func() error {
		seq++
		m := fmt.Sprintf("call-%d@10.0.0.1;z9hG4bK%08d", seq, seq)
		pc := PaceCall{Key: slots, Member: m, IntervalUS: 50, MaxWaitUS: 2_000_000, ClaimUS: 3_000_000}
		if shared {
			pc.Share = PaceShare{Name: fmt.Sprint("cust", seq%4), Weight: 1, LeadUS: 50, KeepUS: 5_000_000, SumCap: 1000}
		}
		a, s, paced, err := AdmitPace(ctx, c, m, []AdmitBucket{peer, cust}, pc)
		if err != nil {
			return err
		}
		if !a.Admitted || a.Duplicate || !paced || !s.OK {
			return fmt.Errorf("call %d: %+v %+v paced %v; want admitted and a slot", seq, a, s, paced)
		}
		return nil
	}
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for range rate {
		<-tick.C
		if err := call(); err != nil {
			b.Fatal(err)
		}
	}
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		<-tick.C
		if err := call(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var per float64
	for _, line := range strings.Split(info, "\r\n") {
		stats, ok := strings.CutPrefix(line, "cmdstat_evalsha:")
		if !ok {
			continue
		}
		for _, kv := range strings.Split(stats, ",") {
			if v, ok := strings.CutPrefix(kv, "usec_per_call="); ok {
				if _, err := fmt.Sscan(v, &per); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	n, err := c.ZCard(ctx, peer.Key).Result()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(per, "script-µs/op")
	b.ReportMetric(float64(n), "members")
}
