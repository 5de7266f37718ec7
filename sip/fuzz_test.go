package sip

import (
	"os"
	"path/filepath"
	"testing"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/sip/internal/msgpart"
)

// FuzzRequestHandling runs what the proxy does with a message before and
// after sipgo's transaction layer (the screen, the in-dialog checks and
// hop, the outbound INVITE with its Route stripping, Via folding and
// Record-Route) on whatever the parser accepts: it must never panic.
func FuzzRequestHandling(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("..", "testdata", "sip", "*"))
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("BYE sip:carrier@127.0.0.1:5070 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.2:5061;branch=z9hG4bK-1;rport\r\n" +
		"Route: <sip:127.0.0.1:5060;transport=udp;lr>\r\nRoute: <sip:127.0.0.1:5060;transport=tcp;lr>\r\n" +
		"From: <sip:a@x>;tag=1\r\nTo: <sip:b@y>;tag=2\r\nCall-ID: c\r\nCSeq: 2 BYE\r\nMax-Forwards: 0\r\nX-Customer: acme\r\nContent-Length: 0\r\n\r\n"))
	f.Add([]byte("INVITE sip:carrier@127.0.0.1:5070 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.2:5061;branch=z9hG4bK-2\r\n" +
		"Route: <sip:127.0.0.1:5060;transport=udp;lr;cg=AAAAAAAAAAAAAAAA>\r\n" +
		"From: <sip:a@x>;tag=1\r\nTo: <sip:b@y>;tag=2\r\nCall-ID: c\r\nCSeq: 3 INVITE\r\nContent-Length: 0\r\n\r\n"))
	f.Add([]byte("sip:127.0.0.1:5071;transport=tcp"))

	p, err := New(Options{Config: func() *config.Config { return testConfig() }, Admission: &fakeAdmitter{refuse: -1}, Pacer: &fakePacer{}})
	if err != nil {
		f.Fatal(err)
	}
	lo := local{host: "127.0.0.1", port: 5060, exact: true}
	p.locals = map[localKey]local{{network: "udp"}: lo, {network: "tcp"}: lo}
	p.firstLocal = map[string]local{"udp": lo, "tcp": lo}
	cfg := testConfig()
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = parseCarrierURI(string(data))
		msg, err := sipmsg.ParseMessage(data)
		if err != nil {
			return
		}
		req, ok := msg.(*sipmsg.Request)
		if !ok {
			_ = p.screen(msg)
			return
		}
		req.SetSource("127.0.0.2:5061")
		_ = p.screen(req)
		if !wellFormed(req) {
			return // the screen never lets such a request reach the paths below
		}
		_ = msgpart.HeaderValue(req, "X-Customer")
		if msgpart.HasToTag(req) {
			if hop, code := p.prepareInDialog(req, true); code == 0 {
				_ = hop.out.String()
			}
			return
		}
		tok, _ := p.keys.mint(cfg, dialogLegs{}, msgpart.CallID(req), msgpart.Tag(req.From().Params))
		out := p.outboundInvite(cfg, req, target{host: "127.0.0.1", port: 5070, transport: "UDP"}, tok)
		_ = out.String()
	})
}
