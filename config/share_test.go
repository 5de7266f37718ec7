package config

import (
	"errors"
	"strings"
	"testing"
)

// Fair sharing of carriers (issue 24, item 2): weights on peers and
// customers default to 1, share_by on carriers to none (sharing is
// turned on per carrier: it costs store work on every call); both are
// checked.
func TestShareDefaultsAndValidation(t *testing.T) {
	c, err := Parse([]byte(`
peers: [{name: d, sources: [127.0.0.1/32], cps: 5}, {name: e, sources: [127.0.0.2/32], cps: 5, weight: 7}]
customers: [{name: acme, cps: 5}, {name: globex, cps: 5, weight: 3}]
carriers:
  - {name: a, uri: "sip:127.0.0.1:5070", cps: 20, max_wait: 1s}
  - {name: b, uri: "sip:127.0.0.1:5071", cps: 20, max_wait: 1s, share_by: peer}
  - {name: c, uri: "sip:127.0.0.1:5072", cps: 20, max_wait: 1s, share_by: none}
routes: {default: [a, b, c]}
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		got, want any
	}{
		{"peer d weight", c.Peers[0].Weight, 1},
		{"peer e weight", c.Peers[1].Weight, 7},
		{"customer acme weight", c.Customers[0].Weight, 1},
		{"customer globex weight", c.Customers[1].Weight, 3},
		{"carrier a share_by", c.Carriers[0].ShareBy, ShareByNone},
		{"carrier b share_by", c.Carriers[1].ShareBy, ShareByPeer},
		{"carrier c share_by", c.Carriers[2].ShareBy, ShareByNone},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	if p := c.Peer("e"); p == nil || p.Weight != 7 || c.Peer("x") != nil {
		t.Errorf("Peer(e) = %+v, Peer(x) = %v; want peer e, nil", p, c.Peer("x"))
	}
	// A Config built by hand (zero values) means the same defaults.
	var p Peer
	var cu Customer
	var ca Carrier
	if p.ShareWeight() != 1 || cu.ShareWeight() != 1 || ca.Sharing() != ShareByNone {
		t.Errorf("zero values: weights %d %d, share_by %q; want 1, 1, none", p.ShareWeight(), cu.ShareWeight(), ca.Sharing())
	}

	for _, tc := range []struct{ yaml, want string }{
		{`peers: [{name: d, sources: [127.0.0.1/32], cps: 5, weight: 0}]`, "peers[0].weight: must be between 1 and 1000 (got 0)"},
		{`peers: [{name: d, sources: [127.0.0.1/32], cps: 5}]
customers: [{name: acme, cps: 5, weight: 1001}]`, "customers[0].weight: must be between 1 and 1000 (got 1001)"},
		{`peers: [{name: d, sources: [127.0.0.1/32], cps: 5}]
carriers: [{name: a, uri: "sip:127.0.0.1:5070", cps: 20, max_wait: 1s, share_by: route}]
routes: {default: [a]}`, `carriers[0].share_by: must be one of "customer", "peer", "none" (got "route")`},
	} {
		_, err := Parse([]byte(tc.yaml))
		var ve *ValidationError
		if !errors.As(err, &ve) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse:\n%s\ngot %v, want an error saying %q", tc.yaml, err, tc.want)
		}
	}
}
