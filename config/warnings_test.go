package config

import (
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestWarnings(t *testing.T) {
	// This host, as the checks see it: loopback and one documentation
	// address (the machine's own would make the cases depend on it).
	saved := hostAddrs
	hostAddrs = func() map[netip.Addr]bool {
		return map[netip.Addr]bool{netip.MustParseAddr("127.0.0.1"): true, netip.MustParseAddr("192.0.2.77"): true,
			netip.MustParseAddr("2001:db8::77"): true}
	}
	t.Cleanup(func() { hostAddrs = saved })
	base := func() *Config {
		c, err := Parse([]byte(minimal))
		if err != nil {
			t.Fatal(err)
		}
		c.Carriers[0].MaxWait = 2 * time.Second // its own warning below
		return c
	}
	if w := Warnings(base()); len(w) != 0 {
		t.Fatalf("a loopback example warns: %v", w)
	}
	for _, tc := range []struct {
		name string
		edit func(c *Config)
		want string
	}{
		{"carrier host name", func(c *Config) { c.Carriers[0].URI = "sip:carrier.example:5060" }, `carriers[0].uri: host name "carrier.example" is resolved`},
		{"long max_wait", func(c *Config) { c.Carriers[0].MaxWait = 90 * time.Second }, "carriers[0].max_wait: 1m30s is beyond"},
		{"overload without adaptive", func(c *Config) { c.Carriers[0].Overload = &Overload{Codes: []int{503}} }, "carriers[0].overload: set without adaptive: true"},
		{"overload on an adaptive carrier", func(c *Config) {
			c.Carriers[0].Overload = &Overload{Codes: []int{503}}
			c.Carriers[0].Adaptive = true
		}, ""},
		{"open http", func(c *Config) { c.HTTP.Listen = "0.0.0.0:9090" }, "http.token: not set while http.listen 0.0.0.0:9090 is reachable beyond this machine: the API is read-only without it"},
		{"pool without secret", func(c *Config) { c.Store.Redis = &Redis{Addrs: []string{"127.0.0.1:6379"}} }, "sip.dialog_secret: not set with store.redis"},
		{"fail open", func(c *Config) {
			c.Store.Redis = &Redis{Addrs: []string{"127.0.0.1:6379"}}
			c.SIP.DialogSecret = "0123456789abcdef"
			c.Store.OnError = "admit"
		}, "store.on_error: admit"},
		{"resource priority claim without namespaces", func(c *Config) { c.Peers[0].AllowResourcePriority = true }, "peers[0].allow_resource_priority: true, but priority.resource_priority names no namespace"},
		{"resource priority claim with namespaces", func(c *Config) {
			c.Peers[0].AllowResourcePriority = true
			c.Priority.ResourcePriority = []string{"esnet"}
		}, ""},
		{"carrier is the node itself", func(c *Config) { c.Carriers[0].URI = "sip:127.0.0.1:5060" },
			"carriers[0].uri: sip:127.0.0.1:5060 is this node's own listener udp://127.0.0.1:5060: its calls come back"},
		{"carrier on the node's wildcard listener", func(c *Config) {
			c.SIP.Listen = []string{"tcp://0.0.0.0:5070"}
			c.SIP.UnknownSource, c.SIP.Advertise = "drop", "192.0.2.1"
			c.Carriers[0].URI = "sip:127.0.0.1:5070;transport=tcp"
		}, "carriers[0].uri: sip:127.0.0.1:5070;transport=tcp is this node's own listener tcp://0.0.0.0:5070"},
		{"carrier at the host's address under the wildcard listener", func(c *Config) {
			c.SIP.Listen = []string{"udp://0.0.0.0:5060"}
			c.SIP.UnknownSource, c.SIP.Advertise = "drop", "sip.example.net"
			c.Carriers[0].URI = "sip:192.0.2.77:5060"
		}, "carriers[0].uri: sip:192.0.2.77:5060 is this node's own listener udp://0.0.0.0:5060 (192.0.2.77 is an address of this host)"},
		{"IPv6 host address under an IPv4 wildcard", func(c *Config) {
			c.SIP.Listen = []string{"udp://0.0.0.0:5060", "udp://[2001:db8::1]:5060"}
			c.SIP.UnknownSource, c.SIP.Advertise = "drop", "sip.example.net"
			c.Carriers[0].URI = "sip:[2001:db8::77]:5060"
		}, ""},
		{"IPv4 host address under an IPv6-only wildcard", func(c *Config) {
			c.SIP.Listen = []string{"udp://[::]:5060", "udp://192.0.2.10:5060"}
			c.SIP.UnknownSource, c.SIP.Advertise = "drop", "sip.example.net"
			c.Carriers[0].URI = "sip:192.0.2.77:5060"
		}, ""},
		{"IPv4 host address under a dual-stack wildcard", func(c *Config) {
			c.SIP.Listen = []string{"udp://[::]:5060"}
			c.SIP.UnknownSource, c.SIP.Advertise = "drop", "sip.example.net"
			c.Carriers[0].URI = "sip:192.0.2.77:5060"
		}, "carriers[0].uri: sip:192.0.2.77:5060 is this node's own listener udp://[::]:5060 (192.0.2.77 is an address of this host)"},
		{"carrier at another host under the wildcard listener", func(c *Config) {
			c.SIP.Listen = []string{"udp://0.0.0.0:5060"}
			c.SIP.UnknownSource, c.SIP.Advertise = "drop", "sip.example.net"
			c.Carriers[0].URI = "sip:192.0.2.78:5060"
		}, ""},
		{"carrier on the node's port, other transport", func(c *Config) {
			c.SIP.Listen = []string{"tcp://127.0.0.1:5070", "udp://127.0.0.1:5080"}
			c.Carriers[0].URI = "sip:127.0.0.1:5070"
		}, ""},
		{"carrier on the default port", func(c *Config) { c.Carriers[0].URI = "sip:127.0.0.1" }, "carriers[0].uri: sip:127.0.0.1 is this node's own listener udp://127.0.0.1:5060"},
		{"one-digit priority prefix", func(c *Config) { c.Priority.Numbers = []string{"911", "+1"} },
			`priority.numbers[1]: "+1" is a prefix of 1 digit(s): every called number that starts with it is a priority call`},
		{"two-digit priority number, exact", func(c *Config) { c.Priority.Numbers = []string{"15$", "112"} }, ""},
		{"priority prefix with separators", func(c *Config) { c.Priority.Numbers = []string{"(1)"} }, `priority.numbers[0]: "(1)" is a prefix of 1 digit(s)`},
		{"carrier at the advertised address", func(c *Config) {
			c.SIP.Advertise = "192.0.2.1:5060"
			c.Carriers[0].URI = "sip:192.0.2.1:5060"
		}, "carriers[0].uri: sip:192.0.2.1:5060 is this node's sip.advertise 192.0.2.1:5060"},
		{"carrier on the advertised host, another port", func(c *Config) {
			c.SIP.Advertise = "192.0.2.1"
			c.Carriers[0].URI = "sip:192.0.2.1:5080"
		}, ""},
		{"public reject", func(c *Config) { c.SIP.Listen = []string{"udp://192.0.2.10:5060"} }, "sip.unknown_source: reject answers every stranger"},
		{"no record-route", func(c *Config) { c.SIP.RecordRoute = false }, "sip.record_route: false"},
		{"wildcard listen without advertise", func(c *Config) {
			c.SIP.Listen = []string{"udp://0.0.0.0:5060"}
			c.SIP.UnknownSource = "drop"
		}, "sip.advertise: not set while udp://0.0.0.0:5060 listens on every interface"},
		{"wildcard listen with advertise", func(c *Config) {
			c.SIP.Listen = []string{"udp://[::]:5060"}
			c.SIP.UnknownSource = "drop"
			c.SIP.Advertise = "sip.example.net"
		}, ""},
		{"redis password in clear", func(c *Config) {
			c.Store.Redis = &Redis{Addrs: []string{"127.0.0.1:6379", "10.0.0.7:6379"}, Password: "pw"}
			c.SIP.DialogSecret = "0123456789abcdef"
		}, "store.redis.password: sent in clear to 10.0.0.7:6379"},
		{"redis password over TLS", func(c *Config) {
			c.Store.Redis = &Redis{Addrs: []string{"10.0.0.7:6379"}, Password: "pw", TLS: RedisTLS{Enabled: true}}
			c.SIP.DialogSecret = "0123456789abcdef"
		}, ""},
		{"redis password on loopback", func(c *Config) {
			c.Store.Redis = &Redis{Addrs: []string{"127.0.0.1:6379"}, Password: "pw"}
			c.SIP.DialogSecret = "0123456789abcdef"
		}, ""},
		{"shadow", func(c *Config) { c.Shadow = true }, "shadow: true: limits are counted"},
		{"debug log", func(c *Config) { c.Log.Level = "debug" }, "log.level: debug writes several lines per call"},
		{"carrier in no route", func(c *Config) {
			c.Carriers = append(c.Carriers, Carrier{Name: "carrier-z", URI: "sip:127.0.0.1:5099", CPS: 1, MaxWait: time.Second})
		}, "carriers[1]: carrier-z is in no route: it never gets a call"},
		{"no max_wait", func(c *Config) { c.Carriers[0].MaxWait = 0 }, "carriers[0].max_wait: 0s (the default when unset): a call that would wait at all"},
		{"customer no peer names", func(c *Config) {
			c.Customers = append(c.Customers, Customer{Name: "ghost", CPS: 5})
		}, "customers[0]: ghost is no peer's customer nor in any peer's customers"},
		{"IPv6 source, IPv4 listener", func(c *Config) {
			public(c, "udp://0.0.0.0:5060")
			c.Peers[0].Sources = prefixes("127.0.0.1/32", "2001:db8::/32")
		}, "peers[0].sources[1]: IPv6 source but sip.listen has no listener on IPv6: calls from 2001:db8::/32 cannot reach the node"},
		{"IPv6 loopback source, IPv4 loopback listeners", func(c *Config) { c.Peers[0].Sources = prefixes("::1/128") },
			"peers[0].sources[0]: IPv6 source but sip.listen has no listener on IPv6"},
		{"IPv4 source, IPv6 listener", func(c *Config) {
			public(c, "udp://[2001:db8::5]:5060")
			c.Carriers[0].URI = "sip:[2001:db8::9]:5060"
			c.Peers[0].Sources = prefixes("192.0.2.0/24")
		}, "peers[0].sources[0]: IPv4 source but sip.listen has no listener on IPv4"},
		{"IPv4 source, lone [::] takes both", func(c *Config) {
			public(c, "udp://[::]:5060")
			c.Peers[0].Sources = prefixes("192.0.2.0/24", "2001:db8::/32")
		}, ""},
		{"IPv4 everyone", func(c *Config) {
			public(c, "udp://0.0.0.0:5060")
			c.Peers[0].Sources = prefixes("0.0.0.0/0")
		}, "peers[0].sources[0]: 0.0.0.0/0 makes every IPv4 address on the internet peer dialer-1"},
		{"IPv6 everyone", func(c *Config) {
			public(c, "udp://[::]:5060")
			c.Peers[0].Sources = prefixes("192.0.2.7/32", "::/0")
		}, "peers[0].sources[1]: ::/0 makes every IPv6 address on the internet peer dialer-1"},
		{"public sources, loopback listeners", func(c *Config) { c.Peers[0].Sources = prefixes("127.0.0.1/32", "10.0.0.0/8") },
			"peers[0].sources: 10.0.0.0/8 is beyond this machine, but every sip.listen address is on loopback: calls of dialer-1 from there cannot reach the node"},
		{"many public sources, loopback listeners", func(c *Config) {
			c.Peers[0].Sources = prefixes("10.0.0.1/32", "10.0.0.2/32", "10.0.0.3/32", "10.0.0.4/32")
		}, "peers[0].sources: 10.0.0.1/32, 10.0.0.2/32, 10.0.0.3/32 and 1 more are beyond this machine"},
		{"loopback sources, loopback listeners", func(c *Config) { c.Peers[0].Sources = prefixes("127.0.0.0/8") }, ""},
		{"public sources, public listener", func(c *Config) {
			public(c, "udp://192.0.2.1:5060")
			c.Peers[0].Sources = prefixes("10.0.0.0/8")
		}, ""},
		{"customer a peer may name", func(c *Config) {
			c.Customers = append(c.Customers, Customer{Name: "acme", CPS: 5})
			c.Peers[0].Customers = []string{"acme"}
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base()
			tc.edit(c)
			w := Warnings(c)
			if tc.want == "" {
				if len(w) != 0 {
					t.Errorf("got %q, want none", w)
				}
				return
			}
			if len(w) != 1 || !strings.HasPrefix(w[0], tc.want) {
				t.Errorf("got %q, want one warning starting %q", w, tc.want)
			}
		})
	}
}

// public makes c listen on l alone, with the settings a listener beyond
// loopback wants (so its own warnings stay quiet).
func public(c *Config, l string) {
	c.SIP.Listen = []string{l}
	c.SIP.UnknownSource = "drop"
	c.SIP.Advertise = "sip.example.net"
}

func prefixes(ps ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ps))
	for i, p := range ps {
		out[i] = netip.MustParsePrefix(p)
	}
	return out
}

func TestFamilyWarnings(t *testing.T) {
	for _, tc := range []struct {
		name   string
		listen []string
		uri    string
		want   string // "" = no family warning
	}{
		{"v6 carrier, v4 listeners", []string{"udp://127.0.0.1:5060"}, "sip:[2001:db8::7]:5060",
			"carriers[0].uri: IPv6 carrier but sip.listen has no udp:// listener on IPv6"},
		{"v6 carrier over tcp, udp on v6 only", []string{"udp://[::1]:5060", "tcp://127.0.0.1:5060"}, "sip:[::1]:5070;transport=tcp",
			"carriers[0].uri: IPv6 carrier but sip.listen has no tcp:// listener on IPv6"},
		{"v4 carrier, v6 listener", []string{"udp://[::1]:5060"}, "sip:127.0.0.1:5070",
			"carriers[0].uri: IPv4 carrier but sip.listen has no udp:// listener on IPv4"},
		{"tls carrier, no tls listener", []string{"udp://127.0.0.1:5060", "tcp://127.0.0.1:5060"}, "sips:127.0.0.1:5071",
			"carriers[0].uri: IPv4 carrier but sip.listen has no tls:// listener on IPv4"},
		{"dual stack", []string{"udp://127.0.0.1:5060", "udp://[::1]:5060"}, "sip:[::1]:5070", ""},
		{"lone wildcard [::] takes both", []string{"udp://[::]:5060"}, "sip:127.0.0.1:5070", ""},
		{"0.0.0.0 is IPv4 only", []string{"udp://0.0.0.0:5060"}, "sip:[::1]:5070",
			"carriers[0].uri: IPv6 carrier but sip.listen has no udp:// listener on IPv6"},
		{"host name: not known at check", []string{"udp://127.0.0.1:5060"}, "sip:carrier.example", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(minimal))
			if err != nil {
				t.Fatal(err)
			}
			c.SIP.Listen = tc.listen
			c.SIP.UnknownSource = "drop"
			c.SIP.Advertise = "sip.example.net"
			c.Carriers[0].URI = tc.uri
			var got []string
			for _, w := range Warnings(c) {
				if strings.Contains(w, " carrier but sip.listen") {
					got = append(got, w)
				}
			}
			switch {
			case tc.want == "" && len(got) != 0:
				t.Errorf("warnings %q, want none about address families", got)
			case tc.want != "" && (len(got) != 1 || !strings.HasPrefix(got[0], tc.want)):
				t.Errorf("warnings %q, want one starting %q", got, tc.want)
			}
		})
	}
}

// TestHostAddrsKnowsLoopback: the host's interface addresses, as
// selfCarriers reads them, include loopback's (every Linux host has it).
func TestHostAddrsKnowsLoopback(t *testing.T) {
	if !hostAddrs()[netip.MustParseAddr("127.0.0.1")] {
		t.Fatalf("127.0.0.1 not among this host's addresses: %v", hostAddrs())
	}
}
