package config

import (
	"strings"
	"testing"
	"time"
)

func TestWarnings(t *testing.T) {
	base := func() *Config {
		c, err := Parse([]byte(minimal))
		if err != nil {
			t.Fatal(err)
		}
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
		{"open http", func(c *Config) { c.HTTP.Listen = "0.0.0.0:9090" }, "http.token: not set while http.listen 0.0.0.0:9090"},
		{"pool without secret", func(c *Config) { c.Store.Redis = &Redis{Addrs: []string{"127.0.0.1:6379"}} }, "sip.dialog_secret: not set with store.redis"},
		{"fail open", func(c *Config) {
			c.Store.Redis = &Redis{Addrs: []string{"127.0.0.1:6379"}}
			c.SIP.DialogSecret = "0123456789abcdef"
			c.Store.OnError = "admit"
		}, "store.on_error: admit"},
		{"public reject", func(c *Config) { c.SIP.Listen = []string{"udp://0.0.0.0:5060"} }, "sip.unknown_source: reject answers every stranger"},
		{"no record-route", func(c *Config) { c.SIP.RecordRoute = false }, "sip.record_route: false"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base()
			tc.edit(c)
			w := Warnings(c)
			if len(w) != 1 || !strings.HasPrefix(w[0], tc.want) {
				t.Errorf("got %q, want one warning starting %q", w, tc.want)
			}
		})
	}
}
