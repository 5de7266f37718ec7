package config

import (
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

// Two nodes that run one file, each with its own node_id, addresses, log
// settings and secrets from the environment, show one hash; a setting the
// pool must agree on changes it.
func TestHashCoversThePoolNotTheNode(t *testing.T) {
	load := func(env map[string]string) *Config {
		t.Helper()
		for k, v := range env {
			t.Setenv(k, v)
		}
		c, err := Load("../testdata/cpsguard.yaml")
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	node := func(id, ip, level string) map[string]string {
		return map[string]string{
			"CPSGUARD_NODE_ID":                 id,
			"CPSGUARD_SIP_LISTEN":              "udp://" + ip + ":5060,tcp://" + ip + ":5060",
			"CPSGUARD_SIP_ADVERTISE":           ip,
			"CPSGUARD_SIP_TCP_MAX_CONNECTIONS": "500",
			"CPSGUARD_HTTP_LISTEN":             ip + ":9090",
			"CPSGUARD_HTTP_TOKEN":              "token-of-" + id,
			"CPSGUARD_LOG_LEVEL":               level,
			"CPSGUARD_STORE_REDIS_ADDRS":       "10.0.0.9:26379 10.0.0.8:26379",
			"CPSGUARD_STORE_REDIS_MASTER_NAME": "cps",
			"CPSGUARD_SIP_DIALOG_SECRET":       "0123456789abcdef-" + id,
		}
	}
	a := load(node("edge-1", "10.0.0.1", "info"))
	envB := node("edge-2", "10.0.0.2", "debug")
	envB["CPSGUARD_STORE_REDIS_ADDRS"] = "10.0.0.8:26379 10.0.0.9:26379" // another order
	envB["CPSGUARD_SIP_TCP_MAX_CONNECTIONS"] = "2000"
	b := load(envB)
	// Each node's own certificate files (validation reads them, so set here).
	a.Store.Redis.TLS = RedisTLS{Enabled: true, CAFile: "/etc/edge-1/ca.pem", CertFile: "/etc/edge-1/crt.pem", KeyFile: "/etc/edge-1/key.pem"}
	b.Store.Redis.TLS = RedisTLS{Enabled: true, CAFile: "/etc/edge-2/ca.pem", CertFile: "/etc/edge-2/crt.pem", KeyFile: "/etc/edge-2/key.pem"}
	if a.NodeID == b.NodeID || a.HTTP.Listen == b.HTTP.Listen {
		t.Fatalf("the environment did not make two nodes: %s %s", a.NodeID, b.NodeID)
	}
	ha, hb := a.Hash(), b.Hash()
	if !strings.HasPrefix(ha, "sha256:") || len(ha) != len("sha256:")+64 {
		t.Fatalf("hash %q: want sha256: and 64 hex digits", ha)
	}
	if ha != hb {
		t.Errorf("two nodes of one file: got hashes %s and %s, want one", ha, hb)
	}

	for _, tc := range []struct {
		name string
		edit func(c *Config)
	}{
		{"carrier cps", func(c *Config) { c.Carriers[0].CPS++ }},
		{"carrier max_wait", func(c *Config) { c.Carriers[0].MaxWait += time.Second }},
		{"peer sources", func(c *Config) { c.Peers[0].Sources = c.Peers[0].Sources[:0] }},
		{"routes", func(c *Config) { c.Routes["extra"] = OrderedRoute(c.Carriers[0].Name) }},
		{"shadow", func(c *Config) { c.Shadow = !c.Shadow }},
		{"reject code", func(c *Config) { c.SIP.Reject.Code = 486 }},
		{"key prefix", func(c *Config) { c.Store.KeyPrefix = "other" }},
		{"on_error", func(c *Config) { c.Store.OnError = "reject" }},
		{"redis db", func(c *Config) { c.Store.Redis.DB = 3 }},
		{"dialog secret unset", func(c *Config) { c.SIP.DialogSecret = "" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := load(node("edge-1", "10.0.0.1", "info"))
			tc.edit(c)
			if got := c.Hash(); got == ha {
				t.Errorf("hash unchanged (%s): the pool must agree on %s", got, tc.name)
			}
		})
	}
	if got := (*Config)(nil).Hash(); got != "" {
		t.Errorf("nil config: got %q, want \"\"", got)
	}
	if a.Store.Redis.Addrs[0] != "10.0.0.9:26379" {
		t.Errorf("Hash sorted the running config's addrs in place: %v", a.Store.Redis.Addrs)
	}
}

func TestHTTPListen(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := dir + "/" + name
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	set := write("set.yaml", "http: {listen: 0.0.0.0:9191}\npeers: [{name: x, cps: -1}]  # invalid, still read\n")
	unset := write("unset.yaml", "node_id: a\n")
	bad := write("bad.yaml", "http: [\n")
	upper := write("upper.yaml", "HTTP:\n  Listen: 127.0.0.1:9292\n")
	t.Setenv("CPSGUARD_HTTP_LISTEN", "")
	for _, tc := range []struct {
		name, path, env, want string
		wantErr               bool
	}{
		{"from the file", set, "", "0.0.0.0:9191", false},
		{"default", unset, "", "127.0.0.1:9090", false},
		{"keys in any case, as Load reads them", upper, "", "127.0.0.1:9292", false},
		{"environment first", set, "127.0.0.1:7000", "127.0.0.1:7000", false},
		{"missing file", dir + "/none.yaml", "", "", true},
		{"not YAML", bad, "", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("CPSGUARD_HTTP_LISTEN", tc.env)
			got, err := HTTPListen(tc.path)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("HTTPListen: got %q, %v; want %q, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

// Every PerNode entry names a setting, with or without store.redis.
func TestPerNodePaths(t *testing.T) {
	for _, path := range PerNode {
		c := Default()
		c.Store.Redis = &Redis{}
		if err := zeroPath(reflect.ValueOf(c).Elem(), strings.Split(path, ".")); err != nil {
			t.Errorf("PerNode %q: %v", path, err)
		}
	}
	if err := zeroPath(reflect.ValueOf(Default()).Elem(), []string{"sip", "lisen"}); err == nil {
		t.Error("a misspelt path was accepted")
	}
	if got := Default().Hash(); got == "" { // store.redis nil: its paths are skipped
		t.Error("hash of the defaults is empty")
	}
}
