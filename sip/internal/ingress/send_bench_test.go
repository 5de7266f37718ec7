//go:build linux

package ingress

import (
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/ipv4"
)

// Issue 23 asks whether sends should batch too (sendmmsg). These
// benchmarks price one 600-byte datagram sent over loopback to a socket a
// goroutine drains, one sendto(2) each against sendmmsg(2) batches
// (x/net/ipv4 WriteBatch), so the choice rests on a measurement
// (BENCHMARKS.md, session 10). On loopback the sender's system call also
// delivers the datagram to the receiving socket, as it does for the node.
//
//	go test -run '^$' -bench 'Send' -benchtime 200000x ./sip/internal/ingress

const benchDatagram = 600

// sendSink is a loopback socket drained in batches until closed.
func sendSink(b *testing.B) (*net.UDPConn, *atomic.Int64, func()) {
	b.Helper()
	rc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		b.Fatal(err)
	}
	_ = rc.SetReadBuffer(8 << 20)
	var got atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		pc := ipv4.NewPacketConn(rc)
		ms := make([]ipv4.Message, 64)
		for i := range ms {
			ms[i].Buffers = [][]byte{make([]byte, 2048)}
		}
		for {
			n, err := pc.ReadBatch(ms, 0)
			if err != nil {
				return
			}
			got.Add(int64(n))
		}
	}()
	return rc, &got, func() { rc.Close(); <-done }
}

func sendSource(b *testing.B) *net.UDPConn {
	b.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		b.Fatal(err)
	}
	_ = c.SetWriteBuffer(8 << 20)
	return c
}

// cpuNow is the process's CPU time (user + system) so far.
func cpuNow() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the process's CPU time per datagram since t0, the
// receiver's included (on loopback the kernel's delivery is in the send).
func reportCPU(b *testing.B, t0 time.Duration) {
	b.ReportMetric(float64(cpuNow()-t0)/float64(b.N), "cpu-ns/op")
}

// paced keeps the sender within the receiver's reach, so that what is
// measured is the send and not drops at a full receive buffer.
func paced(got *atomic.Int64, sent int64) {
	for deadline := time.Now().Add(time.Second); sent-got.Load() > 2048 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Microsecond)
	}
}

func BenchmarkSendto(b *testing.B) {
	rc, got, stop := sendSink(b)
	defer stop()
	c := sendSource(b)
	defer c.Close()
	dst := rc.LocalAddr().(*net.UDPAddr)
	msg := make([]byte, benchDatagram)
	b.SetBytes(benchDatagram)
	b.ResetTimer()
	t0 := cpuNow()
	defer reportCPU(b, t0)
	for i := range b.N {
		if _, err := c.WriteToUDP(msg, dst); err != nil {
			b.Fatal(err)
		}
		if i%256 == 255 {
			paced(got, int64(i+1))
		}
	}
}

func benchmarkSendmmsg(b *testing.B, batch int) {
	rc, got, stop := sendSink(b)
	defer stop()
	c := sendSource(b)
	defer c.Close()
	pc := ipv4.NewPacketConn(c)
	dst := rc.LocalAddr()
	msg := make([]byte, benchDatagram)
	ms := make([]ipv4.Message, batch)
	for i := range ms {
		ms[i] = ipv4.Message{Buffers: [][]byte{msg}, Addr: dst}
	}
	b.SetBytes(benchDatagram)
	b.ResetTimer()
	t0 := cpuNow()
	defer reportCPU(b, t0)
	for sent := 0; sent < b.N; {
		k := min(batch, b.N-sent)
		for off := 0; off < k; {
			n, err := pc.WriteBatch(ms[off:k], 0)
			if err != nil {
				b.Fatal(err)
			}
			off += n
		}
		sent += k
		paced(got, int64(sent))
	}
}

func BenchmarkSendmmsg8(b *testing.B)  { benchmarkSendmmsg(b, 8) }
func BenchmarkSendmmsg32(b *testing.B) { benchmarkSendmmsg(b, 32) }
