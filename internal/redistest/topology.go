package redistest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// clusterPort returns a free port p whose cluster bus port p+10000 is free too.
func clusterPort(t testing.TB) int {
	t.Helper()
	for i := 0; i < 100; i++ {
		p := FreePort(t)
		if p+10000 > 65535 {
			continue
		}
		if portFree(p + 10000) {
			return p
		}
	}
	t.Fatal("no free port pair for a cluster node")
	return 0
}

func portFree(p int) bool {
	l, err := netListen("127.0.0.1:" + strconv.Itoa(p))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// Cluster is a Redis Cluster of private servers on loopback.
type Cluster struct {
	// Masters are the nodes created as masters; Replicas[i] replicates one of
	// them (redis-cli decides which).
	Masters, Replicas []*Server
}

// Addrs returns every node's address, masters first.
func (c *Cluster) Addrs() []string {
	var out []string
	for _, s := range append(append([]*Server{}, c.Masters...), c.Replicas...) {
		out = append(out, s.Addr())
	}
	return out
}

// StartCluster starts masters × (1 + replicasPer) cluster-enabled servers and
// joins them with `redis-cli --cluster create`. The node timeout is short
// (1 s) so failover tests stay fast. It waits until the cluster is ok.
func StartCluster(t testing.TB, masters, replicasPer int) *Cluster {
	t.Helper()
	Require(t, "redis-cli")
	c := &Cluster{}
	n := masters * (1 + replicasPer)
	var all []*Server
	for i := 0; i < n; i++ {
		s := startOnFreePort(t, clusterPort,
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "1000",
			"--cluster-replica-validity-factor", "0",
		)
		all = append(all, s)
	}
	args := []string{"--cluster", "create"}
	for _, s := range all {
		args = append(args, s.Addr())
	}
	args = append(args, "--cluster-replicas", strconv.Itoa(replicasPer), "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if out, err := all[0].CLI(ctx, args...); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	// redis-cli assigns the first `masters` addresses as masters.
	c.Masters = all[:masters]
	c.Replicas = all[masters:]
	deadline := time.Now().Add(30 * time.Second)
	for _, s := range all {
		for {
			out, _ := s.CLI(ctx, "CLUSTER", "INFO")
			if strings.Contains(out, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("cluster not ok on %s: %s", s.Addr(), out)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return c
}

// Sentinel is a master, its replicas and a quorum of sentinels on loopback.
type Sentinel struct {
	MasterName string
	Master     *Server
	Replicas   []*Server
	Sentinels  []*Server
}

// SentinelAddrs are the sentinels' addresses.
func (s *Sentinel) SentinelAddrs() []string {
	var out []string
	for _, x := range s.Sentinels {
		out = append(out, x.Addr())
	}
	return out
}

// StartSentinel starts a master, `replicas` replicas and three sentinels
// (quorum 2, down-after 1 s) monitoring it as name.
func StartSentinel(t testing.TB, name string, replicas int) *Sentinel {
	t.Helper()
	st := &Sentinel{MasterName: name}
	st.Master = Start(t)
	for i := 0; i < replicas; i++ {
		st.Replicas = append(st.Replicas, Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(st.Master.Port())))
	}
	for i := 0; i < 3; i++ {
		port := FreePort(t)
		dir := t.TempDir()
		conf := filepath.Join(dir, "sentinel.conf")
		body := fmt.Sprintf(`port %d
bind 127.0.0.1
dir %s
sentinel monitor %s 127.0.0.1 %d 2
sentinel down-after-milliseconds %s 1000
sentinel failover-timeout %s 5000
sentinel parallel-syncs %s 1
`, port, dir, name, st.Master.Port(), name, name, name)
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		s := &Server{t: t, bin: Require(t, "redis-server"), dir: dir, port: port,
			args: nil, confFile: conf}
		if err := s.start(); err != nil {
			t.Fatalf("sentinel did not start: %v", err)
		}
		t.Cleanup(s.Kill)
		st.Sentinels = append(st.Sentinels, s)
	}
	// Wait until the replicas are in sync, so a failover has a candidate.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, r := range st.Replicas {
		for {
			out, _ := r.CLI(ctx, "INFO", "replication")
			if strings.Contains(out, "master_link_status:up") {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("replica %s never synced: %s", r.Addr(), out)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return st
}
