package siptest

import (
	"net"
	"testing"
	"time"
)

// TestReadStampedKernelTime checks that ReadStamped returns the kernel's
// receive time, not the time of the read: a datagram left unread for a
// while is stamped when it arrived.
//
// Linux turns receive stamping on for the whole stack in deferred work
// after the first socket asks for it; until then a datagram is stamped
// when read. So a few datagrams are tried, and one must carry its arrival.
func TestReadStampedKernelTime(t *testing.T) {
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := EnableTimestamps(c); err != nil {
		t.Fatalf("EnableTimestamps: %v", err)
	}
	out, err := net.DialUDP("udp", nil, c.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	const unread = 100 * time.Millisecond
	buf, oob := make([]byte, 64), make([]byte, OOBSize)
	var lag time.Duration
	for range 5 {
		sent := time.Now()
		if _, err := out.Write([]byte("INVITE x")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(unread)
		n, from, at, err := ReadStamped(c, buf, oob)
		lag = time.Since(at)
		if err != nil {
			t.Fatalf("ReadStamped: %v", err)
		}
		if string(buf[:n]) != "INVITE x" || from == nil {
			t.Fatalf("got %q from %v, want %q from the sender", buf[:n], from, "INVITE x")
		}
		if at.Before(sent.Add(-time.Millisecond)) {
			t.Fatalf("got a stamp %v before the send, want after it", sent.Sub(at))
		}
		if lag >= unread {
			return // stamped on arrival
		}
	}
	t.Errorf("got stamps %v before the read, want at least %v (the kernel's arrival time)", lag, unread)
}
