package sip

import (
	"net"
	"strconv"
	"testing"

	"github.com/cpsguard/cpsguard/config"
	"github.com/cpsguard/cpsguard/sip/internal/ingress"
)

// BenchmarkShedFromRaw is the whole refusal path of a peer's INVITE shed
// from its raw bytes when its lane is full (shedRawFrom through
// shedDatagram): scan, the checks, the 503 written to a loopback socket
// (the sendto is most of it), counting and, since the refused table,
// remembering it. Each INVITE is a new attempt (its own branch).
//
//	go test ./sip/ -run '^$' -bench 'ShedFromRaw' -benchmem
func BenchmarkShedFromRaw(b *testing.B) {
	adm, pacer := newFakes()
	cfg := testConfig(config.Carrier{Name: "c", URI: "sip:127.0.0.1:5070", CPS: 100})
	p, err := New(Options{Config: func() *config.Config { return cfg }, Admission: adm, Pacer: pacer})
	if err != nil {
		b.Fatal(err)
	}
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	peer, from := peerSocket(b) // answers pile up unread: the kernel drops them
	_ = peer
	msg := []byte(strangerRequest("INVITE", conn.LocalAddr().String(), "", "")(from.String()))
	const mark = "branch=z9hG4bK-INVITE"
	at := indexOf(msg, mark) + len(mark) - len("INVITE")
	if at < len(mark)-len("INVITE") {
		b.Fatal("no branch to vary")
	}
	d := &ingress.Datagram{Data: msg, From: from, Conn: conn, Known: true}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// A new branch of the same width: base 36, six digits.
		var digits [6]byte
		n := strconv.AppendUint(digits[:0], uint64(i)%2176782336, 36)
		copy(msg[at:at+6], "000000")
		copy(msg[at+6-len(n):at+6], n)
		if !p.shedDatagram(d) {
			b.Fatal("not shed")
		}
	}
}

func indexOf(s []byte, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if string(s[i:i+len(sub)]) == sub {
			return i
		}
	}
	return -1
}
