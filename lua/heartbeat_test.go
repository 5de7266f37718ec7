package lua

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cpsguard/cpsguard/internal/redistest"
)

// nodeSet is a client of a redis-server of the test's own and the node
// set key of prefix on it.
func nodeSet(t *testing.T, prefix string) (*redis.Client, string) {
	t.Helper()
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { c.Close() })
	return c, Key(prefix, "nodes", "all")
}

func TestHeartbeatCountsLiveNodes(t *testing.T) {
	c, key := nodeSet(t, "hbtest")
	ctx := context.Background()
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
	c, key := nodeSet(t, "hbdup")
	ctx := context.Background()
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
		r, err := s.who.Beat(ctx, s.node, ttl)
		if err != nil {
			t.Fatalf("beat %d: %v", i, err)
		}
		live, others := r.Live, r.Others
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
		r, err := d.Beat(ctx, "edge-1", ttl)
		if err != nil || len(r.Others) != 0 {
			t.Fatalf("restarted node, beat %d: others %v, %v; want none", i, r.Others, err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	if ttl := c.PTTL(ctx, InstancesKey(key)).Val(); ttl <= 0 {
		t.Fatalf("process set has no TTL (%v)", ttl)
	}
}

// A process that leaves as it stops takes its own entries out of the
// process and reader sets, and its node id out of the node set unless
// another process of that id is live: a node restarted under its node id
// is counted once from its first beat (it was counted twice until the
// predecessor's beat aged out), and is not taken for an older release's
// meanwhile (h49); a duplicate process still counts.
func TestHeartbeatLeave(t *testing.T) {
	c, key := nodeSet(t, "hbleave")
	ctx := context.Background()
	const ttl = time.Minute
	old := &Heartbeater{Client: c, Key: key, Instance: "old1"}
	peer := &Heartbeater{Client: c, Key: key, Instance: "peer"}
	if _, err := old.Beat(ctx, "edge-1", ttl); err != nil {
		t.Fatal(err)
	}
	if _, err := peer.Beat(ctx, "edge-2", ttl); err != nil {
		t.Fatal(err)
	}
	// Without the leave, a restart under edge-1 counts 3 for a ttl.
	ghost := &Heartbeater{Client: c, Key: key, Instance: "new0"}
	if r, err := ghost.Beat(ctx, "edge-1", ttl); err != nil || r.Live != 3 {
		t.Fatalf("restart without leaving: %+v, %v; want 3 live (the predecessor's beat still counts)", r, err)
	}
	if err := ghost.Leave(ctx, "edge-1", ttl); err != nil {
		t.Fatal(err)
	}
	// old1 still beats under edge-1 (a duplicate): the node id stays.
	if got := c.ZScore(ctx, key, "edge-1").Err(); got != nil {
		t.Fatalf("edge-1 left the node set while another of its processes is live: %v", got)
	}
	if err := old.Leave(ctx, "edge-1", ttl); err != nil {
		t.Fatal(err)
	}
	for _, set := range []string{InstancesKey(key), OpaqueReadersKey(key)} {
		if got := c.ZRange(ctx, set, 0, -1).Val(); !slices.Equal(got, []string{"edge-2 peer"}) {
			t.Fatalf("%s after both edge-1 processes left: %q, want edge-2's alone", set, got)
		}
	}
	if got := c.ZRange(ctx, key, 0, -1).Val(); !slices.Equal(got, []string{"edge-2"}) {
		t.Fatalf("node set after every edge-1 process left: %q, want edge-2's alone", got)
	}
	// Nor is edge-1, without a reader for the gap, taken for an older
	// release's by the others.
	if r, err := peer.Beat(ctx, "edge-2", ttl); err != nil || r.Live != 1 || r.Older != 0 {
		t.Fatalf("edge-2 while edge-1 restarts: %+v, %v; want 1 live, none older", r, err)
	}
	restarted := &Heartbeater{Client: c, Key: key, Instance: "new1"}
	if r, err := restarted.Beat(ctx, "edge-1", ttl); err != nil || r.Live != 2 || len(r.Others) != 0 || r.Older != 0 {
		t.Fatalf("restart after the predecessor left: %+v, %v; want 2 live, no other, none older", r, err)
	}
	// A process without an instance id has nothing of its own to take out.
	if err := (&Heartbeater{Client: c, Key: key}).Leave(ctx, "edge-2", ttl); err != nil {
		t.Fatal(err)
	}
	if r, err := peer.Beat(ctx, "edge-2", ttl); err != nil || r.Live != 2 {
		t.Fatalf("edge-2 after an anonymous leave: %+v, %v; want 2 live", r, err)
	}
}

// A node of an older release beats into the node set and the process set,
// never into the readers: the others count it as older until its beat
// expires, and mint base64url tokens meanwhile
// (store.Heartbeat.OpaqueTokens). So is an older process under a node id
// that a newer one beats under too (two processes, or a node rolled back
// under its id while its newer process's beat is still live).
func TestHeartbeatCountsOlderNodes(t *testing.T) {
	c, key := nodeSet(t, "hbold")
	ctx := context.Background()
	const ttl = time.Second
	newA := &Heartbeater{Client: c, Key: key, Instance: "aaaa"}
	newB := &Heartbeater{Client: c, Key: key, Instance: "bbbb"}
	// oldBeat is what heartbeat.lua of the release before does for node
	// id under instance: a ZADD into KEYS[1] and KEYS[2].
	oldBeat := func(node, instance string) {
		t.Helper()
		tm, err := c.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if err := c.ZAdd(ctx, key, redis.Z{Score: float64(tm.UnixMilli()), Member: node}).Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.ZAdd(ctx, InstancesKey(key), redis.Z{Score: float64(tm.UnixMilli()), Member: node + " " + instance}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	beat := func(h *Heartbeater, node string, wantLive, wantOlder int) {
		t.Helper()
		r, err := h.Beat(ctx, node, ttl)
		if err != nil || r.Live != wantLive || r.Older != wantOlder {
			t.Fatalf("%s (%s): %+v, %v; want %d live, %d older", node, h.Instance, r, err, wantLive, wantOlder)
		}
	}
	beat(newA, "new-1", 1, 0)
	oldBeat("old-1", "1111")
	beat(newA, "new-1", 2, 1)
	beat(newB, "new-2", 3, 1)

	time.Sleep(ttl + 100*time.Millisecond) // every beat is now older than the ttl
	// old-1 beats again: the readers that stopped beating (new-2) must
	// not hide it.
	oldBeat("old-1", "1111")
	beat(newA, "new-1", 2, 1)

	time.Sleep(ttl + 100*time.Millisecond)
	beat(newA, "new-1", 1, 0) // the older node left
	// An older process under new-1's own node id (rolled back next to
	// it, or started twice): one node id, two processes, one older.
	oldBeat("new-1", "2222")
	r, err := newA.Beat(ctx, "new-1", ttl)
	if err != nil || r.Older != 1 {
		t.Fatalf("an older process under this node id: %+v, %v; want 1 older", r, err)
	}
	if ttl := c.PTTL(ctx, OpaqueReadersKey(key)).Val(); ttl <= 0 {
		t.Fatalf("reader set has no TTL (%v)", ttl)
	}
}

func FuzzDecodeHeartbeat(f *testing.F) {
	f.Add(int64(1), int64(1700000000000), int64(0), "")
	f.Add(int64(0), int64(5), int64(0), "x")
	f.Add(int64(-5), int64(-1), int64(-1), "abcd")
	f.Add(int64(3), int64(5), int64(2), "x")
	f.Add(int64(3), int64(5), int64(3), "")
	f.Fuzz(func(t *testing.T, n, now, older int64, other string) {
		reply := []any{n, now, older}
		if other != "" {
			reply = append(reply, other)
		}
		got, err := DecodeHeartbeat(reply)
		if ok := n >= 1 && now >= 0 && older >= 0 && older < n; (err == nil) != ok {
			t.Fatalf("DecodeHeartbeat(%v) = %+v, %v", reply, got, err)
		}
		if err == nil && (got.Live != int(n) || got.Now != now || got.Older != int(older) || (other != "") != (len(got.Others) == 1)) {
			t.Fatalf("DecodeHeartbeat(%v) = %+v", reply, got)
		}
		for _, bad := range []any{n, "x", []any{n}, []any{n, now}, []any{n, now, older, int64(3)}, []any{"1", now, older}} {
			if _, err := DecodeHeartbeat(bad); err == nil {
				t.Fatalf("DecodeHeartbeat(%#v) accepted", bad)
			}
		}
	})
}
