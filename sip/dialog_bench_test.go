package sip

import (
	"log/slog"
	"net/netip"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/config"
)

// BenchmarkInDialogCheck is the proxy's cost per in-dialog request before
// it is sent on (prepareInDialog: the proxy's Route entries popped, the
// dialog token opened and checked against the Call-ID, tags and source;
// then admitInDialog: the ended dialogs and the dialog's rate), for INFOs
// of 256 dialogs from their peer leg, in parallel (the rate bound is
// lifted, so every request takes the path of one that passes). cpu-ns/op is the process's CPU
// time (getrusage) per op: on a shared machine it moves less than ns/op,
// which counts the waits for a core too.
//
//	go test ./sip/ -run '^$' -bench InDialogCheck -benchmem -count 5
func BenchmarkInDialogCheck(b *testing.B) {
	oldBurst, oldRate := dialogBurst, dialogRate
	dialogBurst, dialogRate = 1e15, 1e15
	b.Cleanup(func() { dialogBurst, dialogRate = oldBurst, oldRate })
	adm, pacer := newFakes()
	cfg := testConfig(config.Carrier{Name: "c", URI: "sip:127.0.0.1:5070", CPS: 100})
	h := startProxyOpts(b, Options{Config: func() *config.Config { return cfg }, Admission: adm, Pacer: pacer})
	p := h.p
	const dialogs = 256
	peer := netip.MustParseAddrPort("127.0.0.2:5061")
	legs := dialogLegs{Peer: leg{Addr: peer}, Carrier: leg{Addr: netip.MustParseAddrPort("127.0.0.1:5070")}}
	reqs := make([]*sipmsg.Request, dialogs)
	for i := range reqs {
		id := "bench-dialog-" + strconv.Itoa(i)
		tok := mustMint(b, p.keys, cfg, legs, id, "ftag"+strconv.Itoa(i))
		raw := "INFO sip:c@127.0.0.1:5070 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.2:5061;branch=z9hG4bK-bi" + strconv.Itoa(i) + ";rport\r\n" +
			"Route: <sip:" + h.udp + ";lr;" + tokenParam + "=" + tok + ">\r\n" +
			"Max-Forwards: 70\r\nFrom: <sip:a@127.0.0.2>;tag=ftag" + strconv.Itoa(i) + "\r\nTo: <sip:100@127.0.0.1>;tag=ttag\r\n" +
			"Call-ID: " + id + "\r\nCSeq: 2 INFO\r\nContent-Length: 0\r\n\r\n"
		m, err := sipmsg.ParseMessage([]byte(raw))
		if err != nil {
			b.Fatal(err)
		}
		m.SetSource(peer.String())
		m.SetTransport("UDP")
		reqs[i] = m.(*sipmsg.Request)
		if hop, code := p.prepareInDialog(reqs[i], true); code != 0 || p.admitInDialog(&hop, true, reqs[i]) != 0 {
			b.Fatalf("dialog %d: refused (%d)", i, code)
		}
	}
	var next atomic.Uint64
	var ru0, ru1 syscall.Rusage
	b.ReportAllocs()
	b.ResetTimer()
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req := reqs[next.Add(1)%dialogs]
			hop, code := p.prepareInDialog(req, true)
			if code == 0 {
				code = p.admitInDialog(&hop, true, req)
			}
			if code != 0 {
				b.Errorf("refused (%d)", code)
				return
			}
		}
	})
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	b.StopTimer()
	cpu := syscall.TimevalToNsec(ru1.Utime) - syscall.TimevalToNsec(ru0.Utime) + syscall.TimevalToNsec(ru1.Stime) - syscall.TimevalToNsec(ru0.Stime)
	b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
}

// BenchmarkInDialogPieces is the cost of each step of the check of one
// in-dialog request: opening its token (verify), naming its call and
// dialog (two SHA-256), and the guard's table (ended dialogs, rate):
//
//	go test ./sip/ -run '^$' -bench InDialogPieces -benchmem
func BenchmarkInDialogPieces(b *testing.B) {
	cfg := &config.Config{SIP: config.SIP{DialogSecret: "bench-secret-0123456789"}}
	d, err := newDialogKeys(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	peer := netip.MustParseAddrPort("127.0.0.2:5061")
	legs := dialogLegs{Peer: leg{Addr: peer}, Carrier: leg{Addr: netip.MustParseAddrPort("127.0.0.1:5070")}}
	tok := mustMint(b, d, cfg, legs, "bench-dialog-1", "ftag1")
	b.Run("verify", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, st := d.verify(cfg, tok, "bench-dialog-1", "ftag1", "ttag"); st != tokenOK {
				b.Fatal("refused")
			}
		}
	})
	b.Run("callKey", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			callKeyOf("bench-dialog-1", "ftag1", peer)
		}
	})
	b.Run("dialogKey", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			dialogKeyOf(callKey{1}, "ttag")
		}
	})
}
