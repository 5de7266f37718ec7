package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

const example = "../testdata/cpsguard.yaml"

func TestExampleLoads(t *testing.T) {
	c, err := Load(example)
	if err != nil {
		t.Fatalf("Load(%s): %v", example, err)
	}
	if got, want := len(c.Peers), 2; got != want {
		t.Errorf("peers: got %d, want %d", got, want)
	}
	if c.Store.Redis != nil {
		t.Errorf("store.redis: got %v, want nil (in-process store)", c.Store.Redis)
	}
	if got := c.Customer("globex"); got == nil || got.CPS != 0.5 {
		t.Errorf("Customer(globex): got %+v, want cps 0.5", got)
	}
}

// TestBadFiles checks one file per validation rule: each must fail with
// exactly one error, the expected one, so each file proves one rule.
func TestBadFiles(t *testing.T) {
	tests := []struct {
		name string
		want string
	}{
		{"cps_zero", "peers[0].cps: must be > 0 (got 0)"},
		{"cps_negative", "carriers[1].cps: must be > 0 (got -3)"},
		{"cps_huge", "customers[0].cps: must be <= 100000 (got 1e+09)"},
		{"cps_not_number", "customers[0].cps: must be a number (got \"fast\")"},
		{"max_wait_negative", "carriers[0].max_wait: must be >= 0 (got -1s)"},
		{"max_wait_huge", "carriers[0].max_wait: must be at most 24h0m0s (got 25h0m0s)"},
		{"max_wait_no_unit", "carriers[0].max_wait: must be a duration like 2s or 500ms (got 2)"},
		{"unknown_key", "carriers[0].max_wiat: unknown key (did you mean \"max_wait\"?)"},
		{"unknown_section", "metrics: unknown key"},
		{"wrong_type", "shadow: must be true or false (got \"maybe\")"},
		{"cidr_invalid", "peers[0].sources[0]: invalid CIDR \"127.0.0.300/32\": want a network like 192.0.2.0/24"},
		{"cidr_host_bits", "peers[0].sources[0]: invalid CIDR \"127.0.0.1/8\": host bits are set (network is 127.0.0.0/8)"},
		{"sources_empty", "peers[0].sources: must list at least one source address or CIDR"},
		{"same_prefix", "peers[1].sources[0]: 127.0.0.1/32 is also a source of peer \"dialer-1\" (peers[0].sources[0]): a prefix belongs to one peer; overlapping prefixes of different lengths are allowed, the longest prefix wins"},
		{"duplicate_peer", "peers[1].name: duplicate name \"dialer-1\" (also peers[0])"},
		{"duplicate_customer", "customers[1].name: duplicate name \"acme\" (also customers[0])"},
		{"duplicate_carrier", "carriers[1].name: duplicate name \"carrier-a\" (also carriers[0])"},
		{"name_unsafe", "customers[0].name: must be 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit (got \"acme}\")"},
		{"name_missing", "customers[0].name: must be set"},
		{"route_unknown_carrier", "routes.default[1]: unknown carrier \"carrier-z\""},
		{"route_empty", "routes.spare: must list at least one carrier"},
		{"route_duplicate_carrier", "routes.default[1]: carrier \"carrier-a\" is listed twice"},
		{"route_policy", "routes.default.policy: must be one of \"ordered\", \"weighted\", \"least_wait\" (got \"random\")"},
		{"route_weight_ordered", "routes.default.carriers[1].weight: only a weighted route weighs its carriers (policy \"weighted\"; got least_wait)"},
		{"route_weights_zero", "routes.default.carriers: a weighted route needs a carrier of weight > 0 (a carrier takes weight/sum of the calls)"},
		{"route_weight_negative", "routes.default.carriers[0].weight: must be between 0 (only when the others are busy or down) and 1000000 (got -70)"},
		{"route_carrier_unknown_block", "routes.default.carriers[1]: unknown carrier \"carrier-z\""},
		{"route_type", "routes.default: must be a list of carrier names or a block {policy, carriers} (got \"carrier-a\")"},
		{"peer_route_unknown", "peers[0].route: unknown route \"premium\" (routes: default)"},
		{"customer_route_unknown", "customers[0].route: unknown route \"premium\" (routes: default)"},
		{"default_route_missing", "peers[0].route: not set and customer \"acme\" has no route, so calls use route \"default\", which is not defined in routes"},
		{"peer_customer_unknown", "peers[0].customer: unknown customer \"globex\""},
		{"peer_customer_not_listed", "peers[0].customer: customer \"globex\" must also be listed in peers[0].customers"},
		{"peer_customers_unknown", "peers[0].customers[1]: unknown customer \"globex\""},
		{"listen_scheme", "sip.listen[1]: must be udp://host:port, tcp://host:port or tls://host:port (got \"ws://127.0.0.1:5061\")"},
		{"listen_port", "sip.listen[0]: must be udp://host:port, tcp://host:port or tls://host:port with a numeric port (got \"udp://127.0.0.1\")"},
		{"tls_no_cert", "sip.tls.cert_file: must be set with a tls:// listener (sip.listen[1])"},
		{"tls_key_alone", "sip.tls.cert_file: must be set with sip.tls.key_file"},
		{"tls_cert_missing", "sip.tls.cert_file: cannot load the certificate and key: open does-not-exist.crt: no such file or directory"},
		{"tls_ca_missing", "sip.tls.client_ca_file: open does-not-exist-ca.crt: no such file or directory"},
		{"carrier_sips_udp", "carriers[0].uri: a sips: URI goes over TLS (got transport \"udp\" in \"sips:127.0.0.1:5061;transport=udp\")"},
		{"http_listen", "http.listen: must be host:port (got \"localhost\")"},
		{"http_listen_host", "http.listen: host must be an IP address or a DNS name (got \"300.0.0.1\" in \"300.0.0.1:9090\")"},
		{"advertise_host", "sip.advertise: must be host or host:port (got \"300.0.0.1\")"},
		{"listen_host", "sip.listen[0]: host must be an IP address or a DNS name (got \"300.0.0.1\" in \"udp://300.0.0.1:5060\")"},
		{"redis_addr_port_zero", "store.redis.addrs[0]: port must be 1-65535 (got \"127.0.0.1:0\"): it is an address to dial"},
		{"redis_addr_host", "store.redis.addrs[0]: host must be an IP address or a DNS name (got \"redis host\" in \"redis host:6379\")"},
		{"reject_code", "sip.reject.code: must be a 4xx, 5xx or 6xx SIP status (got 200)"},
		{"retry_after_fraction", "sip.reject.retry_after: must be whole seconds: Retry-After counts seconds (got 1.5s)"},
		{"unknown_source", "sip.unknown_source: must be one of \"reject\", \"drop\" (got \"ignore\")"},
		{"on_error", "store.on_error: must be one of \"local\", \"admit\", \"reject\" (got \"retry\")"},
		{"cps_huge_with_burst", "peers[0].cps: must be <= 100000 (got 200000)"},
		{"carrier_cps_with_min_cps", "carriers[0].cps: must be > 0 (got -3)"},
		{"redis_timeout", "store.redis.timeout: must be > 0 (got 0s)"},
		{"redis_timeout_huge", "store.redis.timeout: must be at most 10s: a call waits for Redis that long before its fallback (got 1m0s)"},
		{"redis_expected_nodes", "store.redis.expected_nodes: must be 0 to 1000: the nodes sharing this Redis (got -2)"},
		{"redis_no_addrs", "store.redis.addrs: must list at least one address like 127.0.0.1:6379 (omit store.redis for the in-process store)"},
		{"key_prefix", "store.key_prefix: must be 1-64 letters, digits, '.', '_', ':' or '-' (got \"cps{guard}\")"},
		{"log_level", "log.level: must be one of \"debug\", \"info\", \"warn\", \"error\" (got \"verbose\")"},
		{"log_format", "log.format: must be one of \"json\", \"text\" (got \"xml\")"},
		{"customer_header", "customer_header: must be a header name like X-Customer (got \"X Customer\")"},
		{"carrier_uri", "carriers[0].uri: must be a sip: or sips: URI like sip:192.0.2.10:5060 (got \"127.0.0.1:5070\")"},
		{"carrier_uri_transport", "carriers[1].uri: transport must be udp, tcp or tls (got \"sctp\" in \"sip:127.0.0.1:5071;transport=sctp\")"},
		{"no_peers", "peers: must list at least one peer (without peers every call is refused)"},
		{"carrier_uri_password", "carriers[0].uri: must not contain a password (RFC 3261 deprecates user:password in URIs)"},
		{"carrier_uri_port", "carriers[1].uri: port must be 1-65535 (got 99999 in \"sip:127.0.0.1:99999\")"},
		{"carrier_uri_host", "carriers[1].uri: host must be an IP address or a DNS name like carrier.example (got \"carrier b.example\" in \"sip:carrier b.example:5060\")"},
		{"advertise_port_zero", "sip.advertise: port must be 1-65535 (got \"192.0.2.1:0\"): it is written into Via and Record-Route"},
		{"advertise", "sip.advertise: must be host or host:port (got \"udp://192.0.2.1:5060\")"},
		{"dialog_secret_short", "sip.dialog_secret: must be empty or at least 16 characters (got 6)"},
		{"tcp_idle", "sip.tcp.idle_timeout: must be > 0 (got 0s)"},
		{"setup_timeout", "carriers[0].setup_timeout: must be between 0s (the default, 2s) and 5m (got -1s)"},
		{"retry_after_max", "carriers[0].retry_after_max: must be between 0s (the default, 1m0s) and 1h0m0s (got 2h0m0s)"},
		{"redis_tls_disabled", "store.redis.tls.enabled: must be true when other store.redis.tls settings are given (or remove them)"},
		{"tcp_max", "sip.tcp.max_connections: must be >= 1 (got 0)"},
		{"tcp_per_source", "sip.tcp.max_connections_per_source: must be between 1 and sip.tcp.max_connections (100) (got 500)"},
		{"max_inflight", "sip.max_inflight: must be >= 0 (0 = derived from GOMAXPROCS) (got -1)"},
		{"inflight_wait", "sip.inflight_wait: must be between 0s (shed at once) and 400ms (got 1s)"},
		{"strip_headers", "sip.strip_headers[1]: must be a header name like X-Customer (got \"X Bad\")"},
		{"cps_tiny", "peers[0].cps: must be >= 0.001, one call every 1000 s (got 1e-07)"},
		{"events_per_second", "log.events_per_second: must be between 1 and 100000 (got 0)"},
		{"records_syslog", "records.syslog: must be udp://host:port or tcp://host:port (got \"http://127.0.0.1:514\")"},
		{"records_syslog_port", "records.syslog: must be udp://host:port or tcp://host:port with a port 1-65535 (got \"udp://127.0.0.1\")"},
		{"records_size", "records.max_size_mb: must be between 1 and 102400 (got 0)"},
		{"records_buffer", "records.buffer: must be between 16 and 1048576 (got 1)"},
		{"burst_below_cps", "peers[0].burst: must be 0 (no burst) or >= cps 50 (got 20)"},
		{"burst_huge", "customers[0].burst: must be <= 1000000 (got 2000000)"},
		{"burst_carrier", "carriers[0].burst: not supported on carriers: pacing spaces a carrier's calls 1/cps apart so it never sees more than cps in any rolling second, and a burst would break that promise; set burst on the peer or customer"},
		{"window_calls", "peers[0].windows[0].calls: must be >= 1 (got 0)"},
		{"window_calls_huge", "customers[0].windows[0].calls: must be <= 1000000: a window holds one entry per call (got 5000000)"},
		{"window_per_short", "customers[0].windows[0].per: must be between 1s and 24h (got 500ms)"},
		{"window_per_long", "peers[0].windows[1].per: must be between 1s and 24h (got 48h0m0s)"},
		{"window_duplicate", "peers[0].windows[1].per: duplicate window of 1m0s (also peers[0].windows[0]): give one window per length"},
		{"window_carrier", "carriers[0].windows: not supported on carriers: pacing holds a carrier to cps per rolling second only; set windows on the peer or customer"},
		{"probe_timeout", "carriers[0].probe.timeout: must be between 10ms and the interval, 5s (got 10s)"},
		{"probe_interval_negative", "carriers[0].probe.interval: must be 0s (off) or between 100ms and 1h (got -5s)"},
		{"probe_interval_short", "carriers[0].probe.interval: must be 0s (off) or between 100ms and 1h (got 50ms)"},
		{"probe_down_after", "carriers[0].probe.down_after: must be between 1 and 100 (got 0)"},
		{"overload_decrease", "carriers[0].overload.decrease: must be between 0 and 1, exclusive (got 1.5)"},
		{"overload_code", "carriers[0].overload.codes[1]: must be a final non-2xx status, 300-699 (got 200)"},
		{"overload_min_cps", "carriers[0].overload.min_cps: must be > 0 and <= the carrier's cps, 10 (got 20)"},
		{"min_asr", "carriers[0].min_asr: must be a percentage between 0 (off) and 100 (got 120)"},
		{"min_seizures", "carriers[0].min_seizures: must be between 0 (the default, 20) and 1000000 (got -5)"},
		{"asr_window", "carriers[0].asr_window: must be 0s (the default, 1m0s) or between 1s and 24h (got 100ms)"},
		{"max_calls_negative", "customers[0].max_calls: must be >= 0 (got -1)"},
		{"max_call_duration", "sip.max_call_duration: must be >= 1s and <= 720h (got 0s)"},
		{"max_call_duration_long", "sip.max_call_duration: must be >= 1s and <= 720h (got 2400000h0m0s)"},
		{"reject_calls_code", "sip.reject_calls.code: must be a 4xx, 5xx or 6xx SIP status (got 200)"},
		{"call_refresh_ttl", "sip.call_refresh_ttl: must be between 1s and 1h (got 100ms)"},
		{"drain_grace", "sip.drain_grace: must be > 0 and <= 10m (got 1h0m0s)"},
		{"dialog_token_text", "sip.dialog_token_text: must be one of \"auto\", \"base64url\" (got \"base32\")"},
		{"yaml_indent", "invalid YAML: line 7: did not find expected '-' indicator"},
		{"priority_number", "priority.numbers[1]: must be 1-32 digits, '*' or '#', with an optional leading '+' (separators - . ( ) are ignored) (got \"sos\")"},
		{"priority_exact", "priority.numbers[1]: must be 1-32 digits, '*' or '#', with an optional leading '+' (separators - . ( ) are ignored) (got \"9$11\")"},
		{"priority_number_duplicate", "priority.numbers[1]: duplicate of priority.numbers[0] (\"112\"): separators - . ( ) are ignored"},
		{"priority_namespace", "priority.resource_priority[0]: must be an RFC 4412 namespace like esnet or ets: 1-32 letters, digits or '-' (got \"esnet.0\")"},
		{"destination_prefix", "destinations[0].prefix: must be 1-32 digits, '*' or '#', with an optional leading '+' (separators - . ( ) are ignored) (got \"\")"},
		{"destination_duplicate", "destinations[1].prefix: duplicate of destinations[0].prefix (\"+44\"): a leading '+' does not make another prefix"},
		{"destination_empty", "destinations[0]: sets nothing: give it cps, windows, max_calls or a route"},
		{"destination_burst", "destinations[0].burst: needs cps: a burst is a token bucket refilled at cps"},
		{"destination_route", "destinations[0].route: unknown route \"uk\" (routes: default)"},
		{"repeat_dial_per", "repeat_dial.per: must be between 1s and 24h (got 100ms)"},
		{"repeat_dial_calls", "repeat_dial.calls: must be >= 0 (0 = off) (got -2)"},
		{"peer_reject", "peers[0].reject.reason: must be set"},
		{"tls_stranger_handshakes", "sip.tls.stranger_handshakes_per_second: must be between 1 and 100000 (got 0)"},
		{"key_case_duplicate", "peers[0].cps: the key \"CPS\" repeats \"cps\" of line 8 (keys are not case-sensitive); keep one"},
		{"key_duplicate", "routes: the key \"routes\" repeats \"routes\" of line 12; keep one"},
		{"max_calls_no_record_route", "sip.record_route: must be true when a peer, customer, carrier or destination has max_calls (a call's BYE is seen through Record-Route)"},
	}
	seen := map[string]bool{"bad_many.yaml": true, "bad_yaml_syntax.yaml": true}
	for _, tt := range tests {
		file := "bad_" + tt.name + ".yaml"
		seen[file] = true
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join("..", "testdata", "config", file)
			_, err := Load(path)
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Load(%s): got %v, want a *ValidationError", file, err)
			}
			if len(ve.Errors) != 1 || ve.Errors[0] != tt.want {
				t.Errorf("Load(%s):\ngot  %q\nwant [%q]", file, ve.Errors, tt.want)
			}
			if ve.File != path {
				t.Errorf("File: got %q, want %q", ve.File, path)
			}
			// The expected message is also written in the file, for readers.
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(data), "# want: "+tt.want+"\n") {
				t.Errorf("%s: header comment does not say %q", file, tt.want)
			}
		})
	}
	// Every bad file has a row.
	files, _ := filepath.Glob(filepath.Join("..", "testdata", "config", "bad_*.yaml"))
	for _, f := range files {
		if !seen[filepath.Base(f)] {
			t.Errorf("%s has no row in TestBadFiles", f)
		}
	}
}

func TestYAMLSyntaxError(t *testing.T) {
	_, err := Load("../testdata/config/bad_yaml_syntax.yaml")
	var ve *ValidationError
	if !errors.As(err, &ve) || len(ve.Errors) != 1 || !strings.HasPrefix(ve.Errors[0], "invalid YAML: line ") {
		t.Fatalf("got %v, want one \"invalid YAML: line ...\" error", err)
	}
}

func TestManyErrorsAtOnce(t *testing.T) {
	_, err := Load("../testdata/config/bad_many.yaml")
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("got %v, want *ValidationError", err)
	}
	want := []string{
		`carriers[0].max_wiat: unknown key (did you mean "max_wait"?)`,
		`store.redis.passwrd: unknown key (did you mean "password"?)`,
		`peers[0].sources[1]: invalid CIDR "not-an-ip": want a network like 192.0.2.0/24 or an address`,
		`node_id: must be 1-253 letters, digits, '.', '_' or '-' (got "node 1")`,
		`sip.listen[1]: must be udp://host:port, tcp://host:port or tls://host:port (got "sctp://127.0.0.1:5060")`,
		`sip.reject.code: must be a 4xx, 5xx or 6xx SIP status (got 99)`,
		`store.on_error: must be one of "local", "admit", "reject" (got "panic")`,
		`store.redis.timeout: must be > 0 (got -1s)`,
		`http.listen: must be host:port (got "127.0.0.1")`,
		`log.level: must be one of "debug", "info", "warn", "error" (got "loud")`,
		`peers[0].cps: must be > 0 (got 0)`,
		`peers[0].customer: unknown customer "ghost"`,
		`peers[0].route: unknown route "nowhere" (routes: default)`,
		`peers[1].name: duplicate name "dialer-1" (also peers[0])`,
		`peers[1].sources[0]: 10.0.0.0/8 is also a source of peer "dialer-1" (peers[0].sources[0]): a prefix belongs to one peer; overlapping prefixes of different lengths are allowed, the longest prefix wins`,
		`peers[1].cps: must be > 0 (got -1)`,
		`customers[0].route: unknown route "gold" (routes: default)`,
		`customers[1].name: duplicate name "acme" (also customers[0])`,
		`carriers[1].name: must be 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit (got "carrier b")`,
		`carriers[1].uri: must be a sip: or sips: URI like sip:192.0.2.10:5060 (got "mailto:noc@example.com")`,
		`carriers[1].cps: must be > 0 (got -3)`,
		`carriers[1].max_wait: must be >= 0 (got -2s)`,
		`routes.default[1]: unknown carrier "carrier-x"`,
	}
	got := slices.Sorted(slices.Values(ve.Errors))
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("errors:\ngot  %d: %s\nwant %d: %s", len(got), strings.Join(got, "\n      "), len(want), strings.Join(want, "\n      "))
	}
	// Error() has a header and one line per problem.
	if lines := strings.Split(err.Error(), "\n"); len(lines) != len(want)+1 {
		t.Errorf("Error(): got %d lines, want %d", len(lines), len(want)+1)
	}
	if strings.Contains(err.Error(), "hunter2") {
		t.Errorf("Error() leaks the misspelt password value: %s", err)
	}
}

func TestMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("got %v, want fs.ErrNotExist", err)
	}
	var ve *ValidationError
	if errors.As(err, &ve) {
		t.Errorf("got a ValidationError for a missing file: %v", err)
	}
}

const minimal = `
peers:
  - {name: dialer-1, sources: [127.0.0.1/32], cps: 50}
carriers:
  - {name: carrier-a, uri: "sip:127.0.0.1:5070", cps: 10}
routes:
  default: [carrier-a]
`

func TestDefaults(t *testing.T) {
	c, err := Parse([]byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	checks := []struct {
		name      string
		got, want any
	}{
		{"node_id", c.NodeID, host},
		{"sip.listen", fmt.Sprint(c.SIP.Listen), "[udp://127.0.0.1:5060 tcp://127.0.0.1:5060]"},
		{"sip.record_route", c.SIP.RecordRoute, true},
		{"sip.unknown_source", c.SIP.UnknownSource, "reject"},
		{"sip.dialog_secret", c.SIP.DialogSecret, ""},
		{"sip.reject", c.SIP.Reject, Reject{Code: 503, Reason: "CPS Limit Exceeded"}},
		{"sip.tls.stranger_handshakes_per_second", c.SIP.TLS.StrangerHandshakesPerSecond, 100},
		{"store.redis", c.Store.Redis == nil, true},
		{"store.key_prefix", c.Store.KeyPrefix, "cpsguard"},
		{"store.on_error", c.Store.OnError, "local"},
		{"http.listen", c.HTTP.Listen, "127.0.0.1:9090"},
		{"log", c.Log, Log{Level: "info", Format: "json", Events: true, EventsPerSecond: 200}},
		{"customer_header", c.CustomerHeader, "X-Customer"},
		{"carriers[0].max_wait", c.Carriers[0].MaxWait, time.Duration(0)},
	}
	for _, ck := range checks {
		if ck.got != ck.want {
			t.Errorf("%s: got %v, want %v", ck.name, ck.got, ck.want)
		}
	}
}

func TestRedisDefaults(t *testing.T) {
	c, err := Parse([]byte("store: {redis: {addrs: [127.0.0.1:6379]}}\n" + minimal))
	if err != nil {
		t.Fatal(err)
	}
	if c.Store.Redis == nil || c.Store.Redis.Timeout != 50*time.Millisecond {
		t.Fatalf("store.redis: got %v, want timeout 50ms", c.Store.Redis)
	}
	if got := c.StoreMode(); got != "redis" {
		t.Errorf("StoreMode: got %q, want redis", got)
	}
}

func TestEnvOverride(t *testing.T) {
	// Keys absent from the file (http.listen, sip.listen, the whole redis
	// block) and keys present in it (store.key_prefix, peers' defaults) are
	// all overridable.
	t.Setenv("CPSGUARD_HTTP_LISTEN", "127.0.0.1:19090")
	t.Setenv("CPSGUARD_SIP_LISTEN", "udp://127.0.0.1:15060,tcp://127.0.0.1:15061")
	t.Setenv("CPSGUARD_STORE_KEY_PREFIX", "from-env")
	t.Setenv("CPSGUARD_STORE_REDIS_ADDRS", "10.0.0.1:6379 10.0.0.2:6379")
	t.Setenv("CPSGUARD_STORE_REDIS_PASSWORD", "s3cret")
	t.Setenv("CPSGUARD_STORE_REDIS_TIMEOUT", "80ms")
	t.Setenv("CPSGUARD_SHADOW", "true")
	t.Setenv("CPSGUARD_SIP_REJECT_CODE", "486")
	c, err := Parse([]byte("store: {key_prefix: from-file}\n" + minimal))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.HTTP.Listen, "127.0.0.1:19090"; got != want {
		t.Errorf("http.listen: got %q, want %q", got, want)
	}
	if got, want := c.SIP.Listen, []string{"udp://127.0.0.1:15060", "tcp://127.0.0.1:15061"}; !slices.Equal(got, want) {
		t.Errorf("sip.listen: got %q, want %q", got, want)
	}
	if got, want := c.Store.KeyPrefix, "from-env"; got != want {
		t.Errorf("store.key_prefix: got %q, want %q", got, want)
	}
	r := c.Store.Redis
	if r == nil {
		t.Fatal("store.redis: got nil, want the block built from the environment")
	}
	if !slices.Equal(r.Addrs, []string{"10.0.0.1:6379", "10.0.0.2:6379"}) || r.Password != "s3cret" || r.Timeout != 80*time.Millisecond {
		t.Errorf("store.redis: got %+v (password %q)", r, r.Password)
	}
	if !c.Shadow || c.SIP.Reject.Code != 486 {
		t.Errorf("shadow, sip.reject.code: got %v, %d, want true, 486", c.Shadow, c.SIP.Reject.Code)
	}
}

func TestEnvOverrideInvalid(t *testing.T) {
	t.Setenv("CPSGUARD_SIP_REJECT_CODE", "busy")
	_, err := Parse([]byte(minimal))
	var ve *ValidationError
	if !errors.As(err, &ve) || len(ve.Errors) != 1 || ve.Errors[0] != `CPSGUARD_SIP_REJECT_CODE (sip.reject.code): must be an integer (got "busy")` {
		t.Fatalf("got %v", err)
	}
}

// A store.redis setting from the environment with no store.redis.addrs in
// the file or the environment: the error names the variable (it said only
// "store.redis.addrs: must list at least one address", at the file's
// store: line, which sets nothing of Redis).
func TestEnvRedisWithoutAddrs(t *testing.T) {
	t.Setenv("CPSGUARD_STORE_REDIS_PASSWORD", "s3cret")
	_, err := Parse([]byte("store: {key_prefix: x}\n" + minimal))
	var ve *ValidationError
	want := "CPSGUARD_STORE_REDIS_PASSWORD is set, but store.redis has no addrs: set CPSGUARD_STORE_REDIS_ADDRS (or store.redis.addrs in the file) to use Redis, or unset CPSGUARD_STORE_REDIS_PASSWORD for the in-process store"
	if !errors.As(err, &ve) || len(ve.Errors) != 1 || ve.Errors[0] != want || ve.At(0) != (Position{}) {
		t.Fatalf("got %v, want one error with no place in the file: %s", err, want)
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("the error shows the password: %s", err)
	}
	// A store.redis block in the file without addrs is the file's error.
	_, err = Parse([]byte("store: {redis: {timeout: 1s}}\n" + minimal))
	if !errors.As(err, &ve) || len(ve.Errors) != 1 || !strings.HasPrefix(ve.Errors[0], "store.redis.addrs: must list at least one address") {
		t.Fatalf("store.redis in the file without addrs: got %v", err)
	}
}

func TestEnvVars(t *testing.T) {
	vars := EnvVars()
	for _, want := range []string{"CPSGUARD_STORE_REDIS_PASSWORD", "CPSGUARD_HTTP_LISTEN", "CPSGUARD_NODE_ID", "CPSGUARD_SIP_REJECT_RETRY_AFTER", "CPSGUARD_CUSTOMER_HEADER", "CPSGUARD_SIP_DIALOG_SECRET"} {
		if !slices.Contains(vars, want) {
			t.Errorf("EnvVars() lacks %s: %v", want, vars)
		}
	}
}

func TestSecretsRedacted(t *testing.T) {
	t.Setenv("CPSGUARD_STORE_REDIS_PASSWORD", "redis-pw-123")
	t.Setenv("CPSGUARD_HTTP_TOKEN", "http-token-456")
	t.Setenv("CPSGUARD_SIP_DIALOG_SECRET", "dialog-secret-0123456789")
	c, err := Parse([]byte("store: {redis: {addrs: [127.0.0.1:6379]}}\n" + minimal))
	if err != nil {
		t.Fatal(err)
	}
	if c.Store.Redis.Password != "redis-pw-123" || c.HTTP.Token != "http-token-456" || c.SIP.DialogSecret != "dialog-secret-0123456789" {
		t.Fatalf("secrets not loaded: %q %q %q", c.Store.Redis.Password, c.HTTP.Token, c.SIP.DialogSecret)
	}
	r := c.Redacted()
	shown := map[string]string{
		"Summary":      c.Summary(),
		"%v":           fmt.Sprintf("%v", *c),
		"%+v":          fmt.Sprintf("%+v", *c),
		"%+v Redis":    fmt.Sprintf("%+v", c.Store.Redis),
		"%+v HTTP":     fmt.Sprintf("%+v", c.HTTP),
		"%+v SIP":      fmt.Sprintf("%+v", c.SIP),
		"Redacted %+v": fmt.Sprintf("%+v %+v %+v %+v", *r, *r.Store.Redis, r.HTTP.Token, r.SIP.DialogSecret),
		"LogValue":     c.LogValue().String(),
	}
	for how, s := range shown {
		for _, secret := range []string{"redis-pw-123", "http-token-456", "dialog-secret-0123456789"} {
			if strings.Contains(s, secret) {
				t.Errorf("%s leaks a secret: %s", how, s)
			}
		}
	}
	if !strings.Contains(c.Summary(), "(password set)") || !strings.Contains(c.Summary(), "(token set)") ||
		!strings.Contains(c.Summary(), "dialog_secret set") {
		t.Errorf("Summary does not say the secrets are set:\n%s", c.Summary())
	}
	if r.Store.Redis.Password != Redacted || r.HTTP.Token != Redacted || r.SIP.DialogSecret != Redacted {
		t.Errorf("Redacted(): got %q, %q, %q", r.Store.Redis.Password, r.HTTP.Token, r.SIP.DialogSecret)
	}
	// Redacted copies: the original keeps its secrets.
	if c.Store.Redis.Password != "redis-pw-123" || c.SIP.DialogSecret != "dialog-secret-0123456789" {
		t.Errorf("Redacted() modified the original")
	}
}

// TestDialogSecretLength: an empty secret or one of 16 characters or more
// is valid; a shorter one is refused without showing it.
func TestDialogSecretLength(t *testing.T) {
	for _, tc := range []struct {
		secret string
		ok     bool
	}{
		{"", true},
		{"0123456789abcdef", true},
		{"a much longer dialog secret than that", true},
		{"0123456789abcde", false},
		{"zq9", false},
	} {
		_, err := Parse([]byte(fmt.Sprintf("sip: {dialog_secret: %q}\n%s", tc.secret, minimal)))
		if (err == nil) != tc.ok {
			t.Errorf("dialog_secret of %d characters: got err %v, want ok=%v", len(tc.secret), err, tc.ok)
		}
		if err != nil && tc.secret != "" && strings.Contains(err.Error(), tc.secret) {
			t.Errorf("the error shows the secret: %v", err)
		}
	}
	// An unset secret stays empty (not "REDACTED") and the summary says so.
	plain, err := Parse([]byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	if got := plain.Redacted().SIP.DialogSecret; got != "" {
		t.Errorf("Redacted() of an unset dialog secret: got %q, want empty", got)
	}
	if !strings.Contains(plain.Summary(), "dialog_secret not set") {
		t.Errorf("Summary does not say the dialog secret is not set:\n%s", plain.Summary())
	}
}

func TestRouteNamesCaseInsensitive(t *testing.T) {
	c, err := Parse([]byte(minimal + "  Eu.Premium: [carrier-a]\ncustomers:\n  - {name: Acme, cps: 1, route: EU.premium}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.RouteFor(nil, c.Customer("Acme")); got != "eu.premium" {
		t.Errorf("RouteFor: got %q, want eu.premium", got)
	}
	if _, ok := c.Routes["eu.premium"]; !ok {
		t.Errorf("routes: got %v, want key eu.premium", c.Routes)
	}
}

func TestPeerByAddrLongestPrefix(t *testing.T) {
	c, err := Parse([]byte(`
peers:
  - {name: wide, sources: [10.0.0.0/8, "2001:db8::/32"], cps: 1}
  - {name: narrow, sources: [10.1.0.0/16], cps: 1}
  - {name: host, sources: [10.1.2.3, "2001:db8::1/128"], cps: 1}
carriers:
  - {name: carrier-a, uri: "sip:127.0.0.1:5070", cps: 10}
routes:
  default: [carrier-a]
`))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ addr, want string }{
		{"10.9.9.9", "wide"},
		{"10.1.9.9", "narrow"},
		{"10.1.2.3", "host"},
		{"::ffff:10.1.2.3", "host"},
		{"2001:db8::1", "host"},
		{"2001:db8::2", "wide"},
		{"192.0.2.1", ""},
		{"::1", ""},
	}
	hand := *c
	hand.idx = nil // the linear fallback must agree with the index
	for _, tt := range tests {
		for name, cfg := range map[string]*Config{"indexed": c, "linear": &hand} {
			p := cfg.PeerByAddr(netip.MustParseAddr(tt.addr))
			got := ""
			if p != nil {
				got = p.Name
			}
			if got != tt.want {
				t.Errorf("%s PeerByAddr(%s): got %q, want %q", name, tt.addr, got, tt.want)
			}
		}
	}
}

func TestIndexIgnoredOnEditedCopy(t *testing.T) {
	c, err := Parse([]byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	cp := *c
	cp.Carriers = append([]Carrier{{Name: "carrier-z", CPS: 1}}, c.Carriers...)
	if cp.Carrier("carrier-z") == nil || cp.Carrier("carrier-a").Name != "carrier-a" {
		t.Errorf("an edited copy must not use the original's index")
	}
}

func TestAdvertise(t *testing.T) {
	tests := []struct {
		advertise string
		ok        bool
	}{
		{"proxy.example.com", true},
		{"192.0.2.1:5060", true},
		{"2001:db8::1", true},
		{"[2001:db8::1]:5060", true},
		{"proxy.example.com:sip", false},
		{"sip:proxy.example.com", false},
		{"a b", false},
	}
	for _, tt := range tests {
		_, err := Parse([]byte(fmt.Sprintf("sip: {advertise: %q}\n%s", tt.advertise, minimal)))
		if (err == nil) != tt.ok {
			t.Errorf("advertise %q: got err %v, want ok=%v", tt.advertise, err, tt.ok)
		}
	}
}

// TestMistypedSecretsAreNotEchoed: a secret of the wrong kind is an error
// that names its path and its kind, never its value (check, logs and the
// reload API's 422 body all print these errors).
func TestMistypedSecretsAreNotEchoed(t *testing.T) {
	for _, tc := range []struct{ name, yaml, secret, path string }{
		{"numeric token", "http: {token: 123456789012345678901234567890}\n", "1.2345678901234568e+29", "http.token"},
		{"numeric password", "store: {redis: {addrs: [127.0.0.1:6379], password: 1.5e+40}}\n", "1.5e+40", "store.redis.password"},
		{"list dialog secret", "sip: {dialog_secret: [s3cr3t-value-123456]}\n", "s3cr3t", "sip.dialog_secret"},
		{"map token", "http: {token: {a: hunter2-token}}\n", "hunter2", "http.token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml + minimal))
			if err == nil {
				t.Fatal("no error")
			}
			msg := err.Error()
			if strings.Contains(msg, tc.secret) || !strings.Contains(msg, tc.path) {
				t.Errorf("error %q: want %s named and its value absent", msg, tc.path)
			}
		})
	}
	t.Setenv("CPSGUARD_HTTP_TOKEN", "") // env: the same rule
	t.Setenv("CPSGUARD_SIP_REJECT_CODE", "busy")
	if _, err := Parse([]byte(minimal)); err == nil || !strings.Contains(err.Error(), `(got "busy")`) {
		t.Errorf("a non-secret value is still shown: %v", err)
	}
}

// Burst and extra windows decode onto peers and customers.
func TestLimitsLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "limits.yaml")
	data := `peers:
  - name: dialer-1
    sources: [127.0.0.1/32]
    cps: 10
    burst: 30
    windows: [{calls: 600, per: 1m}, {calls: 10000, per: 24h}]
    customer: acme
    customers: [acme]
customers:
  - {name: acme, cps: 20, windows: [{calls: 100, per: 10s}]}
carriers:
  - {name: carrier-a, uri: "sip:127.0.0.1:5070", cps: 10, max_wait: 2s}
routes:
  default: [carrier-a]
`
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	p := c.Peers[0]
	if p.Burst != 30 || !slices.Equal(p.Windows, []Window{{600, time.Minute}, {10000, 24 * time.Hour}}) {
		t.Errorf("peer: got burst %d windows %v, want 30 [{600 1m} {10000 24h}]", p.Burst, p.Windows)
	}
	cu := c.Customer("acme")
	if cu.Burst != 0 || !slices.Equal(cu.Windows, []Window{{100, 10 * time.Second}}) {
		t.Errorf("customer: got burst %d windows %v, want 0 [{100 10s}]", cu.Burst, cu.Windows)
	}
	for _, want := range []string{"dialer-1: 10 cps burst 30, 600/1m, 10000/24h from", "acme: 20 cps, 100/10s"} {
		if !strings.Contains(c.Summary(), want) {
			t.Errorf("Summary does not say %q:\n%s", want, c.Summary())
		}
	}
}

func TestCarrierProbeAndOverloadDefaults(t *testing.T) {
	c, err := Parse([]byte(`
peers: [{name: d, sources: [127.0.0.1/32], cps: 5}]
carriers:
  - {name: a, uri: "sip:127.0.0.1:5070", cps: 20, max_wait: 1s}
  - {name: b, uri: "sip:127.0.0.1:5071", cps: 20, max_wait: 1s, probe: {interval: 2s}, adaptive: true, overload: {reasons: [CPS exceeded]}}
  - {name: c, uri: "sip:127.0.0.1:5072", cps: 20, max_wait: 1s, probe: {interval: 0s}}
routes: {default: [a, b, c]}
`))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.Carriers[0].Probing(), DefaultProbe; got != want {
		t.Errorf("carrier a probe = %+v, want the default %+v", got, want)
	}
	if got, want := c.Carriers[1].Probing(), (Probe{Interval: 2 * time.Second, Timeout: time.Second, DownAfter: 3, UpAfter: 2}); got != want {
		t.Errorf("carrier b probe = %+v, want %+v (unset fields default)", got, want)
	}
	if got := c.Carriers[2].Probing().Interval; got != 0 {
		t.Errorf("carrier c probe interval = %s, want 0s (off)", got)
	}
	o := c.Carriers[1].Overloaded()
	if !c.Carriers[1].Adaptive || len(o.Codes) != 1 || o.Codes[0] != 503 || o.Decrease != 0.7 || o.MinCPS != 2 || o.Increase != 1 || len(o.Reasons) != 1 {
		t.Errorf("carrier b overload = %+v adaptive %v, want codes [503], decrease 0.7, min 2, increase 1, one reason", o, c.Carriers[1].Adaptive)
	}
}

// TestPriorityDestinationsRepeatDial: the round-3 keys decode into their
// values, with repeat_dial's defaults (off, 1m, 486) and route names
// folded like the others.
func TestPriorityDestinationsRepeatDial(t *testing.T) {
	const yaml = `
priority:
  numbers: ["911", "112", "+44-999"]
  resource_priority: [esnet, ETS]
peers:
  - {name: dialer-1, sources: [127.0.0.1/32], cps: 50, customer: acme, customers: [acme],
     shadow: true, allow_resource_priority: true, reject: {code: 486, reason: Busy Dialer, retry_after: 2s}}
customers:
  - {name: acme, cps: 20, shadow: false, reject: {code: 503, reason: Acme Limit}}
carriers:
  - {name: carrier-a, uri: "sip:127.0.0.1:5070", cps: 10, max_wait: 2s}
routes:
  default: [carrier-a]
  uk: [carrier-a]
destinations:
  - {prefix: "+44", cps: 50, route: UK}
  - {prefix: "1900", windows: [{calls: 100, per: 1m}], max_calls: 20, shadow: true}
`
	c, err := Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Priority.Numbers; !slices.Equal(got, []string{"911", "112", "+44-999"}) {
		t.Errorf("priority.numbers: got %q", got)
	}
	p := c.Peers[0]
	if !p.Shadow || !p.AllowResourcePriority || p.Reject == nil || *p.Reject != (Reject{Code: 486, Reason: "Busy Dialer", RetryAfter: 2 * time.Second}) {
		t.Errorf("peer: got shadow %v, allow_resource_priority %v, reject %+v", p.Shadow, p.AllowResourcePriority, p.Reject)
	}
	if cu := c.Customers[0]; cu.Reject == nil || cu.Reject.Reason != "Acme Limit" {
		t.Errorf("customer reject: got %+v", cu.Reject)
	}
	if d := c.Destinations[0]; d.Prefix != "+44" || d.CPS != 50 || d.Route != "uk" {
		t.Errorf("destinations[0]: got %+v, want prefix +44, cps 50, route uk", d)
	}
	if d := c.Destinations[1]; d.MaxCalls != 20 || !d.Shadow || len(d.Windows) != 1 {
		t.Errorf("destinations[1]: got %+v", d)
	}
	if got, want := c.RepeatDial, DefaultRepeatDial; got != want {
		t.Errorf("repeat_dial: got %+v, want the default %+v", got, want)
	}

	for _, want := range []string{"priority: numbers 911 112 +44-999; resource_priority esnet ETS", "  +44: 50 cps, route uk",
		"  1900: 100/1m, max_calls 20, shadow", "dialer-1: 50 cps", ", shadow, may claim Resource-Priority"} {
		if !strings.Contains(c.Summary(), want) {
			t.Errorf("summary lacks %q:\n%s", want, c.Summary())
		}
	}

	t.Setenv("CPSGUARD_REPEAT_DIAL_CALLS", "3")
	c, err = Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	if r := c.RepeatDial; r.Calls != 3 || r.Per != time.Minute || r.Reject.Code != 486 {
		t.Errorf("repeat_dial with CPSGUARD_REPEAT_DIAL_CALLS=3: got %+v, want 3 calls per 1m, 486", r)
	}
	if want := `repeat_dial: 3 calls per 1m to one number, refused 486 "Repeat Dial Limit"`; !strings.Contains(c.Summary(), want) {
		t.Errorf("summary lacks %q", want)
	}
}

func TestNormalizeNumber(t *testing.T) {
	for _, tt := range []struct{ in, want, dest string }{
		{"911", "911", "911"},
		{"+1(555)010-0199", "+15550100199", "15550100199"},
		{"+44.20.7946.0000", "+442079460000", "442079460000"},
		{"911;phone-context=+1", "911", "911"},
		{"+15550100;npdi;rn=+1555", "+15550100", "15550100"},
		{"", "", ""},
	} {
		if got := NormalizeNumber(tt.in); got != tt.want {
			t.Errorf("NormalizeNumber(%q): got %q, want %q", tt.in, got, tt.want)
		}
		if got := DestinationNumber(NormalizeNumber(tt.in)); got != tt.dest {
			t.Errorf("DestinationNumber(%q): got %q, want %q", tt.in, got, tt.dest)
		}
	}
}

// TestRouteForms (issue 24, item 3): a route is a list of names
// (ordered, as before) or a block {policy, carriers}; a weighted route's
// carriers are {name, weight} blocks. A list-form route hashes as it did
// when routes were lists.
func TestRouteForms(t *testing.T) {
	c, err := Parse([]byte(`
peers: [{name: d, sources: [127.0.0.1/32], cps: 5}]
carriers:
  - {name: a, uri: "sip:127.0.0.1:5070", cps: 20, max_wait: 1s}
  - {name: b, uri: "sip:127.0.0.1:5071", cps: 20, max_wait: 1s}
routes:
  default: [a, b]
  uk: {policy: least_wait, carriers: [b, a]}
  split: {policy: weighted, carriers: [{name: a, weight: 70}, {name: b, weight: 30}]}
  plain: {carriers: [a]}
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		route, policy string
		names         []string
		weights       []int
	}{
		{"default", RouteOrdered, []string{"a", "b"}, []int{0, 0}},
		{"uk", RouteLeastWait, []string{"b", "a"}, []int{0, 0}},
		{"split", RouteWeighted, []string{"a", "b"}, []int{70, 30}},
		{"plain", RouteOrdered, []string{"a"}, []int{0}},
	} {
		r := c.Routes[tc.route]
		var w []int
		for _, rc := range r.Carriers {
			w = append(w, rc.Weight)
		}
		if r.PolicyName() != tc.policy || !slices.Equal(r.Names(), tc.names) || !slices.Equal(w, tc.weights) {
			t.Errorf("route %s: policy %q, carriers %v, weights %v; want %q %v %v", tc.route, r.PolicyName(), r.Names(), w, tc.policy, tc.names, tc.weights)
		}
	}
	b, err := json.Marshal(map[string]Route{"default": c.Routes["default"]})
	if err != nil || string(b) != `{"default":["a","b"]}` {
		t.Errorf("list-form route JSON = %s, %v; want the list it was", b, err)
	}
	if !strings.Contains(c.Summary(), "split: weighted: a 70, b 30") || !strings.Contains(c.Summary(), "uk: least_wait: b, a") {
		t.Errorf("Summary does not describe the routes:\n%s", c.Summary())
	}
}

// A carrier URI that sipgo parses but no packet can reach is refused when
// the file loads, not found out at the first call to the carrier.
func TestCarrierURIHostAndPort(t *testing.T) {
	for _, tc := range []struct {
		uri string
		ok  bool
	}{
		{"sip:192.0.2.10:5060", true},
		{"sip:192.0.2.10", true},
		{"sip:[2001:db8::1]:5060", true},
		{"sips:carrier.example:5061", true},
		{"sip:carrier-1.example.net;transport=tcp", true},
		{"sip:localhost:5070", true},
		{"sip:192.0.2.10:65535", true},
		{"sip:192.0.2.10:65536", false},
		{"sip:192.0.2.10:-1", false},
		{"sip:999.1.1.1:5060", false},
		{"sip:carrier b.example", false},
		{"sip:-carrier.example", false},
		{"sip:carrier..example", false},
		{"sip:carrier_a.example", true}, // not RFC 1123, but resolvers (Docker's) answer it
		{"sip:[2001:db8::zz]:5060", false},
		{"sip:[192.0.2.10]:5060", false},
	} {
		err := checkCarrierURI(tc.uri)
		if (err == nil) != tc.ok {
			t.Errorf("checkCarrierURI(%q): got %v, want ok %v", tc.uri, err, tc.ok)
		}
	}
}

// hostPort takes what net.Listen and net.Dial take: an IP address (IPv6
// with or without a zone), a host name, or no host (":9090", every
// interface); not an address no packet can reach.
func TestHostPort(t *testing.T) {
	for _, tc := range []struct {
		s  string
		ok bool
	}{
		{"127.0.0.1:9090", true},
		{"0.0.0.0:9090", true},
		{":9090", true},
		{"[::1]:9090", true},
		{"[fe80::1%eth0]:9090", true},
		{"localhost:6379", true},
		{"redis-sentinel-0.redis.svc:26379", true},
		{"my_redis:6379", true},
		{"redis.:6379", true},
		{"300.0.0.1:9090", false},
		{"10.0.0:6379", false},
		{"redis host:6379", false},
		{"redis..svc:6379", false},
		{"-redis:6379", false},
		{"[127.0.0.1]:9090", true}, // net.SplitHostPort strips the brackets; net.Dial takes it
		{"127.0.0.1:65536", false},
		{"localhost", false},
	} {
		if err := hostPort(tc.s); (err == nil) != tc.ok {
			t.Errorf("hostPort(%q): got %v, want ok %v", tc.s, err, tc.ok)
		}
	}
}

// store.redis given no value, null or an empty mapping, is an error: the
// YAML library hands it to the decoder as if it were not there, and
// "store: {redis: {}}" was the in-process store, every node of a pool
// counting alone (h68); a carrier's probe left null was refused already. So is a second YAML document, which was ignored.
// Any other key left empty (a list whose items are commented out, a
// setting with no value) is unset, as it always was (h69).
func TestKeysWithoutValue(t *testing.T) {
	withCarrier := func(extra string) string {
		return strings.Replace(minimal, `cps: 10}`, `cps: 10, `+extra+`}`, 1)
	}
	for _, tc := range []struct{ name, file, want string }{
		{"redis null", minimal + "store:\n  redis:\n", "store.redis: empty: give its addrs"},
		{"redis empty", minimal + "store:\n  redis: {}\n", "store.redis: empty: give its addrs"},
		{"probe null", withCarrier("probe: ~"), "carriers[0].probe: must be a map (got nothing)"},
		{"second document", minimal + "---\nshadow: true\n", "a second YAML document"},
		{"third document after an empty one", minimal + "---\n---\nshadow: true\n", "a second YAML document"},
		{"second document not YAML", minimal + "---\nshadow: [\n", "a second YAML document"},
	} {
		_, err := Parse([]byte(tc.file))
		var ve *ValidationError
		if !errors.As(err, &ve) || !strings.Contains(strings.Join(ve.Errors, "\n"), tc.want) {
			t.Errorf("%s: got %v, want an error with %q", tc.name, err, tc.want)
		}
	}
	// Unset, as before: a setting with no value, a section whose items are
	// commented out, an empty list, a "---" at the end; and an empty
	// store.redis the environment gives its value.
	for _, ok := range []string{"sip:\n  advertise: ~\n", "customers:\n#  - {name: acme, cps: 5}\n", "http:\n",
		"sip:\n  strip_headers: []\n", "---\n"} {
		if _, err := Parse([]byte(minimal + ok)); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	t.Setenv("CPSGUARD_STORE_REDIS_ADDRS", "127.0.0.1:6379")
	if _, err := Parse([]byte(minimal + "store:\n  redis:\n")); err != nil {
		t.Errorf("store.redis from the environment: %v", err)
	}
}

// Store addresses that would start the wrong client, and node_id "" as
// DESIGN.md's example writes it (the default, the host name).
func TestStoreAddrsAndEmptyNodeID(t *testing.T) {
	for _, tc := range []struct{ store, want string }{
		{"store:\n  redis:\n    addrs: [127.0.0.1:6379, 127.0.0.1:6379]\n", `store.redis.addrs[1]: duplicate of store.redis.addrs[0] ("127.0.0.1:6379")`},
		{"store:\n  redis:\n    addrs: [127.0.0.1:26379]\n    master_name: \" \"\n", `store.redis.master_name: must not start or end with a blank (got " ")`},
	} {
		_, err := Parse([]byte(minimal + tc.store))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want %q", tc.store, err, tc.want)
		}
	}
	c, err := Parse([]byte("node_id: \"\"\n" + minimal))
	if host := defaultNodeID(); err != nil || c.NodeID != host {
		t.Errorf("node_id \"\": got %v, %v; want the host name %q", c, err, defaultNodeID())
	}
}

// A cps left out is "required", one written as 0 "must be > 0" (h68: both
// read "must be > 0 (got 0)").
func TestMissingCPSIsRequired(t *testing.T) {
	missing := strings.Replace(minimal, "cps: 50}", "}", 1)
	_, err := Parse([]byte(missing))
	if err == nil || !strings.Contains(err.Error(), "peers[0].cps: required: the calls a second allowed, > 0") {
		t.Errorf("peer without cps: got %v", err)
	}
	zero := strings.Replace(minimal, "cps: 50}", "cps: 0}", 1)
	_, err = Parse([]byte(zero))
	if err == nil || !strings.Contains(err.Error(), "peers[0].cps: must be > 0 (got 0)") {
		t.Errorf("peer with cps 0: got %v", err)
	}
}

// http.listen on a TCP port a SIP listener takes is an error: serve failed
// at bind, after check had passed it (h68).
func TestHTTPListenBesideSIP(t *testing.T) {
	for _, tc := range []struct {
		sip, http string
		clash     bool
	}{
		{"tcp://127.0.0.1:5060", "127.0.0.1:5060", true},
		{"tls://127.0.0.1:5061", "127.0.0.1:5061", true},
		{"tcp://0.0.0.0:5060", "127.0.0.1:5060", true},
		{"tcp://127.0.0.1:5060", "[::]:5060", true},
		{"tcp://[::1]:5060", "127.0.0.1:5060", false},
		{"udp://127.0.0.1:5060", "127.0.0.1:5060", false},
		{"tcp://127.0.0.1:5060", "127.0.0.1:9090", false},
		{"tcp://127.0.0.1:5060", "127.0.0.2:5060", false},
	} {
		t.Setenv("CPSGUARD_SIP_LISTEN", tc.sip)
		t.Setenv("CPSGUARD_HTTP_LISTEN", tc.http)
		_, err := Parse([]byte(minimal))
		if got := err != nil && strings.Contains(err.Error(), "takes the TCP port of sip.listen[0]"); got != tc.clash {
			t.Errorf("sip %s, http %s: got %v, want a clash %v", tc.sip, tc.http, err, tc.clash)
		}
	}
}
