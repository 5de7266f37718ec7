package sip

import (
	"testing"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/config"
)

// BenchmarkScreen is the screen's cost per message, on the read loop,
// before sipgo's transaction layer: an initial INVITE from a peer (source
// lookup, header checks, INVITE table), an in-dialog BYE, and a response
// from a carrier.
//
//	go test -run '^$' -bench Screen -benchmem ./sip
func BenchmarkScreen(b *testing.B) {
	adm, pacer := newFakes()
	cfg := testConfig(config.Carrier{Name: "c", URI: "sip:127.0.0.1:5070", CPS: 100})
	p, err := New(Options{Config: func() *config.Config { return cfg }, Admission: adm, Pacer: pacer})
	if err != nil {
		b.Fatal(err)
	}
	parse := func(raw, src string) sipmsg.Message {
		m, err := sipmsg.ParseMessage([]byte(raw))
		if err != nil {
			b.Fatal(err)
		}
		m.SetSource(src)
		m.SetTransport("UDP")
		return m
	}
	invite := parse("INVITE sip:100@127.0.0.1:5060 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.2:5061;branch=z9hG4bK-b1\r\n"+
		"Max-Forwards: 70\r\nFrom: <sip:a@x>;tag=f\r\nTo: <sip:100@y>\r\nCall-ID: bench-1\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n", "127.0.0.2:5061")
	bye := parse("BYE sip:c@127.0.0.1:5070 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.2:5061;branch=z9hG4bK-b2\r\n"+
		"Max-Forwards: 70\r\nFrom: <sip:a@x>;tag=f\r\nTo: <sip:100@y>;tag=t\r\nCall-ID: bench-1\r\nCSeq: 2 BYE\r\nContent-Length: 0\r\n\r\n", "127.0.0.2:5061")
	ok := parse("SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP 127.0.0.1:5060;branch=z9hG4bK-p\r\n"+
		"From: <sip:a@x>;tag=f\r\nTo: <sip:100@y>;tag=t\r\nCall-ID: bench-1\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n", "127.0.0.1:5070")
	for _, tc := range []struct {
		name string
		m    sipmsg.Message
	}{{"invite", invite}, {"bye", bye}, {"response", ok}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if !p.screen(tc.m) {
					b.Fatal("screened out")
				}
			}
		})
	}
}
