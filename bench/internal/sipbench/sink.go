package sipbench

import (
	"context"
	"errors"
	"net"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/cpsguard/cpsguard/internal/siptest"
)

// Arrival is one initial INVITE (first copy of its Call-ID) at the sink.
type Arrival struct {
	CallID string
	// At is the kernel's receive time of the datagram.
	At time.Time
}

// SinkStats counts what the sink saw.
type SinkStats struct {
	Invites        int // distinct Call-IDs
	InviteRetrans  int // further copies of a known INVITE
	Acks, Byes     int
	Other          int // other requests (answered 200, or 481 for an unknown BYE)
	Unparsable     int
	ResponsesRecvd int // responses sent to the sink (not expected)
}

// Sink is a measuring carrier: a UDP UAS that answers every INVITE at once
// with 100 Trying and 200 OK (no 180, copying Record-Route), takes the ACK,
// answers BYE with 200, and records the kernel arrival time of every new
// INVITE. A retransmitted INVITE gets the same 200 again and is counted.
type Sink struct {
	c       *net.UDPConn
	contact string

	mu       sync.Mutex
	calls    map[string]*sinkCall
	arrivals []Arrival
	st       SinkStats
	tag      int
}

type sinkCall struct {
	ok []byte // the 200 OK, resent on INVITE retransmission
}

// NewSink listens on addr (host:port, port 0 = any free port).
func NewSink(addr string) (*Sink, error) {
	c, err := listen(addr)
	if err != nil {
		return nil, err
	}
	s := &Sink{c: c, calls: map[string]*sinkCall{}}
	s.contact = "Contact: <sip:carrier@" + c.LocalAddr().String() + ">"
	return s, nil
}

// Addr is the address the sink listens on.
func (s *Sink) Addr() string { return s.c.LocalAddr().String() }

// Close stops Run.
func (s *Sink) Close() error { return s.c.Close() }

// Run answers requests until ctx is done or the sink is closed.
func (s *Sink) Run(ctx context.Context) {
	stop := context.AfterFunc(ctx, func() { _ = s.c.Close() })
	defer stop()
	buf := make([]byte, 65536)
	oob := make([]byte, siptest.OOBSize)
	for {
		n, from, at, err := siptest.ReadStamped(s.c, buf, oob)
		if err != nil {
			if errors.Is(err, net.ErrClosed) || ctx.Err() != nil {
				return
			}
			continue
		}
		s.handle(buf[:n], from, at)
	}
}

func (s *Sink) handle(b []byte, from *net.UDPAddr, at time.Time) {
	m, ok := parse(b)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !ok {
		s.st.Unparsable++
		return
	}
	if !m.request {
		s.st.ResponsesRecvd++
		return
	}
	callID := m.get("call-id")
	switch m.method {
	case "INVITE":
		if param(m.get("to"), "tag") != "" { // re-INVITE
			s.st.Other++
			s.send(response(&m, 200, "OK", "", s.contact), from)
			return
		}
		if c, ok := s.calls[callID]; ok {
			s.st.InviteRetrans++
			s.send(c.ok, from)
			return
		}
		s.st.Invites++
		s.arrivals = append(s.arrivals, Arrival{CallID: callID, At: at})
		s.tag++
		tag := "sink" + strconv.Itoa(s.tag)
		s.send(response(&m, 100, "Trying", ""), from)
		extra := make([]string, 0, 4)
		for _, h := range m.hdrs {
			if h.name == "record-route" {
				extra = append(extra, "Record-Route: "+h.value)
			}
		}
		extra = append(extra, s.contact)
		ok := response(&m, 200, "OK", tag, extra...)
		s.calls[callID] = &sinkCall{ok: ok}
		s.send(ok, from)
	case "ACK":
		s.st.Acks++
	case "BYE":
		s.st.Byes++
		if _, ok := s.calls[callID]; !ok {
			s.send(response(&m, 481, "Call/Transaction Does Not Exist", ""), from)
			return
		}
		s.send(response(&m, 200, "OK", ""), from)
	default:
		s.st.Other++
		s.send(response(&m, 200, "OK", ""), from)
	}
}

func (s *Sink) send(b []byte, to *net.UDPAddr) { _, _ = s.c.WriteToUDP(b, to) }

// Arrivals returns the recorded INVITE arrivals, oldest first.
func (s *Sink) Arrivals() []Arrival {
	s.mu.Lock()
	out := append([]Arrival(nil), s.arrivals...)
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].At.Before(out[j].At) })
	return out
}

// Stats returns the counters so far.
func (s *Sink) Stats() SinkStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st
}
