package lua

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cpsguard/cpsguard/internal/redistest"
)

func TestHeartbeatCountsLiveNodes(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer c.Close()
	ctx := context.Background()
	key := Key("hbtest", "nodes", "all")
	// b's beat must still be live at c's, two round trips later: with a
	// 300 ms ttl a stall of the test or of Redis in between expired it.
	const ttl = time.Second
	for i, node := range []string{"a", "b", "a", "c"} {
		r, err := Heartbeat(ctx, c, key, Beat{Node: node, TTL: ttl})
		if err != nil {
			t.Fatalf("beat %d: %v", i, err)
		}
		want := []int{1, 2, 2, 3}[i]
		if r.Live != want || len(r.Others) != 0 {
			t.Fatalf("beat %d (%s): got %d live, others %v; want %d, none", i, node, r.Live, r.Others, want)
		}
	}
	time.Sleep(ttl + 100*time.Millisecond) // every beat is now older than the ttl
	r, err := Heartbeat(ctx, c, key, Beat{Node: "b", TTL: ttl})
	if err != nil || r.Live != 1 {
		t.Fatalf("after ttl: got %+v, %v; want 1 live", r, err)
	}
	if ttl := c.PTTL(ctx, key).Val(); ttl <= 0 {
		t.Fatalf("node set has no TTL (%v)", ttl)
	}
}

// Two processes beating under one node id see each other from their second
// beat on, and count as two deciders; a process restarted under its node id
// does not take its dead predecessor for a second one.
func TestHeartbeatFindsTwoProcessesOfOneNode(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer c.Close()
	ctx := context.Background()
	key := Key("hbdup", "nodes", "all")
	const ttl = 2 * time.Second

	type beat struct {
		who        *Heartbeater
		node       string
		wantLive   int
		wantOthers []string
	}
	a := &Heartbeater{Client: c, Key: key, Instance: "aaaa"}
	b := &Heartbeater{Client: c, Key: key, Instance: "bbbb"}
	other := &Heartbeater{Client: c, Key: key, Instance: "cccc"}
	for i, s := range []beat{
		{a, "edge-1", 1, nil},
		{other, "edge-2", 2, nil},
		// b starts under edge-1: on its first beat, a beat before it started.
		{b, "edge-1", 3, nil},
		{a, "edge-1", 3, []string{"bbbb"}},
		{b, "edge-1", 3, []string{"aaaa"}},
		{other, "edge-2", 3, nil},
	} {
		live, others, err := s.who.Beat(ctx, s.node, ttl)
		if err != nil {
			t.Fatalf("beat %d: %v", i, err)
		}
		if live != s.wantLive || !slices.Equal(others, s.wantOthers) {
			t.Errorf("beat %d (%s %s): got %d live, others %v; want %d, %v", i, s.node, s.who.Instance, live, others, s.wantLive, s.wantOthers)
		}
		time.Sleep(2 * time.Millisecond) // distinct Redis milliseconds
	}

	// A restart: d replaces a (a stops beating) under edge-1, while b is
	// stopped too. d never reports a, which last beat before d started.
	if err := c.ZRem(ctx, InstancesKey(key), "edge-1 bbbb").Err(); err != nil {
		t.Fatal(err)
	}
	d := &Heartbeater{Client: c, Key: key, Instance: "dddd"}
	for i := range 3 {
		_, others, err := d.Beat(ctx, "edge-1", ttl)
		if err != nil || len(others) != 0 {
			t.Fatalf("restarted node, beat %d: others %v, %v; want none", i, others, err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	if ttl := c.PTTL(ctx, InstancesKey(key)).Val(); ttl <= 0 {
		t.Fatalf("process set has no TTL (%v)", ttl)
	}
}

func FuzzDecodeHeartbeat(f *testing.F) {
	f.Add(int64(1), int64(1700000000000), "")
	f.Add(int64(0), int64(5), "x")
	f.Add(int64(-5), int64(-1), "abcd")
	f.Fuzz(func(t *testing.T, n, now int64, other string) {
		reply := []any{n, now}
		if other != "" {
			reply = append(reply, other)
		}
		got, err := DecodeHeartbeat(reply)
		if ok := n >= 1 && now >= 0; (err == nil) != ok {
			t.Fatalf("DecodeHeartbeat(%v) = %+v, %v", reply, got, err)
		}
		if err == nil && (got.Live != int(n) || got.Now != now || (other != "") != (len(got.Others) == 1)) {
			t.Fatalf("DecodeHeartbeat(%v) = %+v", reply, got)
		}
		for _, bad := range []any{n, "x", []any{n}, []any{n, now, int64(3)}, []any{"1", now}} {
			if _, err := DecodeHeartbeat(bad); err == nil {
				t.Fatalf("DecodeHeartbeat(%#v) accepted", bad)
			}
		}
	})
}
