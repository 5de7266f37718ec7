package sip

import (
	"net"
	"runtime/metrics"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	sipmsg "github.com/emiago/sipgo/sip"

	"github.com/cpsguard/cpsguard/config"
)

// BenchmarkCall runs one whole call per op through the proxy, as the
// bench/ SIPp scenario does (uac_txn.xml against uas.xml): INVITE, 100,
// 200 (answered by a raw UDP carrier), ACK, BYE and its 200, each caller
// goroutine on its own socket, admission and pacing faked (no store I/O).
// allocs/op and B/op are the whole process's: the proxy's plus the raw
// ends' (the same before and after a change of the proxy); cpu-µs/op is
// the process's CPU time (getrusage) per call; goroutines/op the
// goroutines the process started per call (the raw ends start none per
// call: every one is the proxy's or sipgo's, each a scheduler hand-off).
//
//	go test ./sip/ -run '^$' -bench 'Call$' -benchtime 5000x -count 3 -benchmem
func BenchmarkCall(b *testing.B) {
	car := newBenchEnd(b, "127.0.0.1")
	adm, pacer := newFakes()
	cfg := testConfig(config.Carrier{Name: "raw", URI: "sip:" + car.addr, CPS: 1e6, MaxWait: time.Second})
	cfg.Peers[0].CPS, cfg.Customers[0].CPS = 1e6, 1e6
	udp := startProxyOpts(b, Options{Config: func() *config.Config { return cfg }, Admission: adm, Pacer: pacer}).udp
	port := mustPort(b, car.addr)
	// The carrier answers every INVITE 200 (with its tag and Contact) and
	// every BYE 200, back to where each came from; ACKs end there.
	go func() {
		buf := make([]byte, 65535)
		for {
			n, from, err := car.conn.ReadFromUDP(buf)
			if err != nil {
				return
			}
			m, err := sipmsg.ParseMessage(append([]byte(nil), buf[:n]...))
			req, ok := m.(*sipmsg.Request)
			if err != nil || !ok {
				continue
			}
			switch req.Method {
			case sipmsg.INVITE:
				res := sipmsg.NewResponseFromRequest(req, 200, "OK", nil)
				res.To().Params.Add("tag", "bt")
				res.AppendHeader(&sipmsg.ContactHeader{Address: sipmsg.Uri{Scheme: "sip", User: "c", Host: "127.0.0.1", Port: port}})
				_, _ = car.conn.WriteToUDP([]byte(res.String()), from)
			case sipmsg.BYE:
				_, _ = car.conn.WriteToUDP([]byte(sipmsg.NewResponseFromRequest(req, 200, "OK", nil).String()), from)
			}
		}
	}()
	var workers atomic.Int64
	var ru0, ru1 syscall.Rusage
	created := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	b.ReportAllocs()
	b.ResetTimer()
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	metrics.Read(created)
	g0 := created[0].Value.Uint64()
	b.RunParallel(func(pb *testing.PB) {
		w := strconv.FormatInt(workers.Add(1), 10)
		conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP("127.0.0.2")})
		if err != nil {
			b.Error(err)
			return
		}
		defer conn.Close()
		me := &benchEnd{conn: conn, addr: conn.LocalAddr().String(), buf: make([]byte, 65535)}
		// ask sends msg until its final response comes (Timer A/E: a
		// datagram lost on a loaded box is not a failure), at most 10
		// times; a late answer to an earlier call's copy is skipped.
		ask := func(msg, id string, method sipmsg.RequestMethod) *sipmsg.Response {
			for try := 0; try < 10; try++ {
				me.write(b, udp, msg)
				for {
					r := me.readResponseWithin(b, 500*time.Millisecond)
					if r == nil {
						break
					}
					if r.CallID() != nil && r.CallID().Value() == id && r.CSeq() != nil && r.CSeq().MethodName == method {
						return r
					}
				}
			}
			return nil
		}
		for i := 0; pb.Next(); i++ {
			id := "bench-call-" + w + "-" + strconv.Itoa(i)
			from := "From: <sip:a@" + me.addr + ">;tag=bf" + w + "\r\n"
			inv := "INVITE sip:100@" + udp + " SIP/2.0\r\nVia: SIP/2.0/UDP " + me.addr + ";branch=z9hG4bK.inv" + id + ";rport\r\n" +
				"Max-Forwards: 70\r\n" + from + "To: <sip:100@" + udp + ">\r\nCall-ID: " + id + "\r\n" +
				"CSeq: 1 INVITE\r\nContact: <sip:a@" + me.addr + ">\r\nContent-Length: 0\r\n\r\n"
			ok := ask(inv, id, sipmsg.INVITE)
			if ok == nil || ok.StatusCode != 200 || ok.RecordRoute() == nil || ok.Contact() == nil {
				b.Errorf("INVITE %s: answer %v", id, ok)
				return
			}
			route := "Route: " + ok.RecordRoute().Value() + "\r\n"
			to := "To: " + ok.To().Value() + "\r\n"
			ruri := ok.Contact().Address.String()
			me.write(b, udp, "ACK "+ruri+" SIP/2.0\r\nVia: SIP/2.0/UDP "+me.addr+";branch=z9hG4bK.ack"+id+";rport\r\n"+
				route+"Max-Forwards: 70\r\n"+from+to+"Call-ID: "+id+"\r\nCSeq: 1 ACK\r\nContent-Length: 0\r\n\r\n")
			bye := "BYE " + ruri + " SIP/2.0\r\nVia: SIP/2.0/UDP " + me.addr + ";branch=z9hG4bK.bye" + id + ";rport\r\n" +
				route + "Max-Forwards: 70\r\n" + from + to + "Call-ID: " + id + "\r\nCSeq: 2 BYE\r\nContent-Length: 0\r\n\r\n"
			if r := ask(bye, id, sipmsg.BYE); r == nil || r.StatusCode != 200 {
				b.Errorf("BYE %s: answer %v", id, r)
				return
			}
		}
	})
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	metrics.Read(created)
	b.StopTimer()
	b.ReportMetric(float64(created[0].Value.Uint64()-g0)/float64(b.N), "goroutines/op")
	cpu := time.Duration(syscall.TimevalToNsec(ru1.Utime) - syscall.TimevalToNsec(ru0.Utime) + syscall.TimevalToNsec(ru1.Stime) - syscall.TimevalToNsec(ru0.Stime))
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
}
