package ingress

import (
	"context"
	"errors"
	"net"
	"runtime/pprof"
	"time"
)

// batchSize is how many datagrams one read takes from a socket at most.
const batchSize = 32

// Read reads conn until it is closed (or fails) and queues what it reads;
// it returns the socket's error (net.ErrClosed after a Close). Run one per
// socket; several sockets may feed one Ingress. On Linux it takes up to
// batchSize datagrams per system call (recvmmsg).
func (g *Ingress) Read(conn *net.UDPConn) error {
	var err error
	pprof.Do(context.Background(), pprof.Labels("stage", "ingress.reader"), func(context.Context) {
		err = g.read(conn)
	})
	return err
}

func (g *Ingress) read(conn *net.UDPConn) error {
	r, err := newBatchReader(conn, batchSize, g.o.MaxSize+1)
	if err != nil {
		return g.readOne(conn)
	}
	scratch := new(Datagram)
	for {
		n, err := r.read()
		if err != nil {
			if errors.Is(err, errBatchUnsupported) {
				return g.readOne(conn)
			}
			return err
		}
		now := time.Now()
		for i := range n {
			data, from, ok := r.datagram(i)
			if !ok {
				g.o.Drop(DropOversized)
				continue
			}
			g.takeInto(scratch, conn, data, from, now)
		}
	}
}

// readOne is the portable reader: one datagram per system call.
func (g *Ingress) readOne(conn *net.UDPConn) error {
	buf := make([]byte, g.o.MaxSize+1)
	scratch := new(Datagram)
	for {
		n, from, err := conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			return err
		}
		g.takeInto(scratch, conn, buf[:n], from, time.Now())
	}
}
