package sipbench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cpsguard/cpsguard/internal/siptest"
)

// CallerOptions configure one paced run of calls.
type CallerOptions struct {
	// Target is the proxy (or the sink, for a baseline) as host:port.
	Target string
	// Local is the caller's address (default 127.0.0.1:0).
	Local string
	// Rate is INVITEs per second, sent on a fixed schedule (t0 + i/Rate).
	Rate float64
	// Count is the number of calls.
	Count int
	// Linger is how long to wait for outstanding calls after the last
	// INVITE (default 5 s).
	Linger time.Duration
	// Prefix makes Call-IDs unique across runs (default: time based).
	Prefix string
	// Headers are extra header lines for every INVITE (no CRLF).
	Headers []string
	// At, when set, gives the send time of call i as an offset from the
	// start, replacing the fixed schedule i/Rate (Rate must still be > 0).
	At func(i int) time.Duration
}

// CallRecord is what the caller saw of one call. Times are the local clock
// before the INVITE was written (Sent) and kernel receive times (others).
type CallRecord struct {
	CallID  string
	Sent    time.Time
	Trying  time.Time // first 100 Trying; zero if none
	Final   time.Time // first final response; zero if none
	Code    int       // final status code; 0 if none
	Retrans int       // INVITE and BYE retransmissions by the caller
	Done    bool      // 2xx: BYE answered; non-2xx: ACKed
}

// CallerStats sums up a run.
type CallerStats struct {
	Sent, Finals, OK, Rejected, Done, NoFinal, Retrans int
	Codes                                              map[int]int
	Elapsed                                            time.Duration // first INVITE to last INVITE
}

type ccall struct {
	rec        CallRecord
	invite     []byte
	branch     string
	fromTag    string
	provisonal bool
	nextRT     time.Time
	rtEvery    time.Duration
	bye        []byte
	byeTo      *net.UDPAddr
	byeSentAt  time.Time
	ack        []byte
	ackTo      *net.UDPAddr
}

const t1 = 500 * time.Millisecond

// RunCaller places opts.Count calls at opts.Rate and returns one record per
// call (in sending order) when every call is done, when Linger has passed
// after the last INVITE, or when ctx is done.
func RunCaller(ctx context.Context, opts CallerOptions) ([]CallRecord, CallerStats, error) {
	if opts.Rate <= 0 || opts.Count <= 0 {
		return nil, CallerStats{}, errors.New("sipbench: rate and count must be > 0")
	}
	if opts.Local == "" {
		opts.Local = "127.0.0.1:0"
	}
	if opts.Linger <= 0 {
		opts.Linger = 5 * time.Second
	}
	if opts.Prefix == "" {
		opts.Prefix = strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	target, err := net.ResolveUDPAddr("udp", opts.Target)
	if err != nil {
		return nil, CallerStats{}, err
	}
	c, err := listen(opts.Local)
	if err != nil {
		return nil, CallerStats{}, err
	}
	defer c.Close()
	local := c.LocalAddr().String()

	var (
		mu      sync.Mutex
		calls   = make([]*ccall, 0, opts.Count)
		byID    = make(map[string]*ccall, opts.Count)
		pending = 0 // calls not done
	)
	allDone := make(chan struct{})
	var doneOnce sync.Once
	sendingOver := false

	finish := func(cc *ccall) { // mu held
		if !cc.rec.Done {
			cc.rec.Done = true
			pending--
			if pending == 0 && sendingOver {
				doneOnce.Do(func() { close(allDone) })
			}
		}
	}

	// Reader: responses.
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		buf := make([]byte, 65536)
		oob := make([]byte, siptest.OOBSize)
		for {
			n, from, at, err := siptest.ReadStamped(c, buf, oob)
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				continue
			}
			m, ok := parse(buf[:n])
			if !ok {
				continue
			}
			if m.request { // e.g. a BYE from the far end: answer 200
				_, _ = c.WriteToUDP(response(&m, 200, "OK", ""), from)
				continue
			}
			mu.Lock()
			cc := byID[m.get("call-id")]
			if cc == nil {
				mu.Unlock()
				continue
			}
			switch m.cseqMethod() {
			case "INVITE":
				if m.code < 200 {
					cc.provisonal = true
					if m.code == 100 && cc.rec.Trying.IsZero() {
						cc.rec.Trying = at
					}
					break
				}
				if cc.rec.Final.IsZero() {
					cc.rec.Final, cc.rec.Code = at, m.code
					if m.code < 300 {
						cc.ack, cc.bye, cc.ackTo = dialogRequests(&m, cc, local, target)
						cc.byeTo = cc.ackTo
						cc.byeSentAt = time.Now()
						_, _ = c.WriteToUDP(cc.ack, cc.ackTo)
						_, _ = c.WriteToUDP(cc.bye, cc.byeTo)
					} else {
						cc.ack = nonOKAck(&m, cc)
						cc.ackTo = target
						_, _ = c.WriteToUDP(cc.ack, cc.ackTo)
						finish(cc)
					}
				} else if cc.ack != nil { // retransmitted final: ACK again
					_, _ = c.WriteToUDP(cc.ack, cc.ackTo)
				}
			case "BYE":
				if m.code >= 200 {
					finish(cc)
				}
			}
			mu.Unlock()
		}
	}()

	// Retransmitter: INVITE until a response, BYE until its final.
	rtStop := make(chan struct{})
	rtDone := make(chan struct{})
	go func() {
		defer close(rtDone)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-rtStop:
				return
			case now := <-t.C:
				mu.Lock()
				for _, cc := range calls {
					if cc.rec.Done {
						continue
					}
					switch {
					case cc.rec.Final.IsZero() && !cc.provisonal && now.After(cc.nextRT) && cc.rtEvery <= 4*time.Second:
						_, _ = c.WriteToUDP(cc.invite, target)
						cc.rec.Retrans++
						cc.rtEvery *= 2
						cc.nextRT = now.Add(cc.rtEvery)
					case cc.bye != nil && now.Sub(cc.byeSentAt) > t1:
						_, _ = c.WriteToUDP(cc.bye, cc.byeTo)
						cc.rec.Retrans++
						cc.byeSentAt = now
					}
				}
				mu.Unlock()
			}
		}
	}()

	// Sender: INVITEs on schedule.
	interval := time.Duration(float64(time.Second) / opts.Rate)
	t0 := time.Now()
	var last time.Time
	extra := strings.Join(opts.Headers, "\r\n")
	if extra != "" {
		extra += "\r\n"
	}
sending:
	for i := 0; i < opts.Count; i++ {
		due := t0.Add(time.Duration(i) * interval)
		if opts.At != nil {
			due = t0.Add(opts.At(i))
		}
		if d := time.Until(due); d > 0 {
			select {
			case <-ctx.Done():
				break sending
			case <-time.After(d):
			}
		} else if ctx.Err() != nil {
			break sending
		}
		id := fmt.Sprintf("%s-%d@bench", opts.Prefix, i)
		cc := &ccall{
			branch:  fmt.Sprintf("z9hG4bK-%s-%d", opts.Prefix, i),
			fromTag: "c" + strconv.Itoa(i),
			rtEvery: t1,
		}
		cc.invite = []byte("INVITE sip:bench@" + opts.Target + " SIP/2.0\r\n" +
			"Via: SIP/2.0/UDP " + local + ";branch=" + cc.branch + ";rport\r\n" +
			"Max-Forwards: 70\r\n" +
			"From: <sip:caller@" + local + ">;tag=" + cc.fromTag + "\r\n" +
			"To: <sip:bench@" + opts.Target + ">\r\n" +
			"Call-ID: " + id + "\r\n" +
			"CSeq: 1 INVITE\r\n" +
			"Contact: <sip:caller@" + local + ">\r\n" +
			extra +
			"Content-Length: 0\r\n\r\n")
		cc.rec.CallID = id
		mu.Lock()
		calls = append(calls, cc)
		byID[id] = cc
		pending++
		now := time.Now()
		cc.rec.Sent = now
		cc.nextRT = now.Add(t1)
		_, _ = c.WriteToUDP(cc.invite, target)
		mu.Unlock()
		last = now
	}
	mu.Lock()
	sendingOver = true
	if pending == 0 {
		doneOnce.Do(func() { close(allDone) })
	}
	mu.Unlock()

	linger := time.NewTimer(opts.Linger)
	select {
	case <-allDone:
	case <-linger.C:
	case <-ctx.Done():
	}
	linger.Stop()
	close(rtStop)
	<-rtDone
	_ = c.Close()
	<-readerDone

	mu.Lock()
	defer mu.Unlock()
	st := CallerStats{Codes: map[int]int{}, Elapsed: last.Sub(t0)}
	out := make([]CallRecord, len(calls))
	for i, cc := range calls {
		r := cc.rec
		out[i] = r
		st.Sent++
		st.Retrans += r.Retrans
		if r.Code == 0 {
			st.NoFinal++
			continue
		}
		st.Finals++
		st.Codes[r.Code]++
		if r.Code < 300 {
			st.OK++
		} else {
			st.Rejected++
		}
		if r.Done {
			st.Done++
		}
	}
	return out, st, nil
}

// dialogRequests builds the ACK and BYE for a 2xx: Request-URI = Contact,
// Route = Record-Route reversed, sent to the first route (loose routing) or
// the Contact.
func dialogRequests(res *msg, cc *ccall, local string, target *net.UDPAddr) (ack, bye []byte, to *net.UDPAddr) {
	rr := res.all("record-route")
	routes := make([]string, len(rr))
	for i, r := range rr {
		routes[len(rr)-1-i] = r
	}
	ruri := uriOf(res.get("contact"))
	if ruri == "" {
		ruri = "sip:bench@" + target.String()
	}
	to = target
	if len(routes) > 0 {
		if a, err := net.ResolveUDPAddr("udp", hostPort(uriOf(routes[0]))); err == nil {
			to = a
		}
	} else if a, err := net.ResolveUDPAddr("udp", hostPort(ruri)); err == nil {
		to = a
	}
	build := func(method, cseq, branch string) []byte {
		var b strings.Builder
		b.WriteString(method + " " + ruri + " SIP/2.0\r\n")
		b.WriteString("Via: SIP/2.0/UDP " + local + ";branch=" + branch + ";rport\r\n")
		b.WriteString("Max-Forwards: 70\r\n")
		for _, r := range routes {
			b.WriteString("Route: " + r + "\r\n")
		}
		b.WriteString("From: " + res.get("from") + "\r\n")
		b.WriteString("To: " + res.get("to") + "\r\n")
		b.WriteString("Call-ID: " + res.get("call-id") + "\r\n")
		b.WriteString("CSeq: " + cseq + "\r\n")
		b.WriteString("Content-Length: 0\r\n\r\n")
		return []byte(b.String())
	}
	return build("ACK", "1 ACK", cc.branch+"-ack"), build("BYE", "2 BYE", cc.branch+"-bye"), to
}

// nonOKAck is the ACK of a non-2xx final: same Via branch and Request-URI
// as the INVITE, To from the response.
func nonOKAck(res *msg, cc *ccall) []byte {
	inv, _ := parse(cc.invite)
	ruri := strings.SplitN(inv.start, " ", 3)[1]
	var b strings.Builder
	b.WriteString("ACK " + ruri + " SIP/2.0\r\n")
	b.WriteString("Via: " + inv.get("via") + "\r\n")
	b.WriteString("Max-Forwards: 70\r\n")
	b.WriteString("From: " + inv.get("from") + "\r\n")
	b.WriteString("To: " + res.get("to") + "\r\n")
	b.WriteString("Call-ID: " + inv.get("call-id") + "\r\n")
	b.WriteString("CSeq: 1 ACK\r\n")
	b.WriteString("Content-Length: 0\r\n\r\n")
	return []byte(b.String())
}
