package records

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"time"
)

// RFC 5424 header fields of every record.
const (
	// syslogPRI is facility local0 (16) and severity informational (6):
	// 16*8 + 6.
	syslogPRI = "<134>1 "
	appName   = "cpsguard"
	msgID     = "call"
	// maxHostname is RFC 5424's bound on HOSTNAME.
	maxHostname = 255
)

// Timeouts of the syslog sink.
var (
	syslogDialTimeout  = 2 * time.Second
	syslogWriteTimeout = 2 * time.Second
	// syslogRedial spaces TCP dials after a failure: records meanwhile
	// are lost (counted), the sink does not stall on a dead server.
	syslogRedial = time.Second
)

// syslogOutput sends each record as one RFC 5424 message: one datagram
// over UDP, octet-counted frames (RFC 6587 3.4.1) over TCP.
type syslogOutput struct {
	network, addr string
	header        []byte // "<134>1 " is written with the time; this is " HOST APP PROCID MSGID - "
	conn          net.Conn
	lastDial      time.Time
	buf           []byte
}

// newSyslog parses raw (udp://host:port or tcp://host:port). The
// connection is made at the first record, and again after a failure.
func newSyslog(raw, hostname string) (*syslogOutput, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("records: syslog %q: %w", raw, err)
	}
	if u.Scheme != "udp" && u.Scheme != "tcp" {
		return nil, fmt.Errorf("records: syslog %q: want udp:// or tcp://", raw)
	}
	if _, _, err := net.SplitHostPort(u.Host); err != nil {
		return nil, fmt.Errorf("records: syslog %q: %w", raw, err)
	}
	o := &syslogOutput{network: u.Scheme, addr: u.Host}
	o.header = []byte(" " + headerField(hostname, maxHostname) + " " + appName + " " + strconv.Itoa(os.Getpid()) + " " + msgID + " - ")
	return o, nil
}

// headerField makes s a valid RFC 5424 header field: printable US-ASCII
// without spaces (others become '_'), at most n bytes, "-" when empty.
func headerField(s string, n int) string {
	b := []byte(s)
	for i, c := range b {
		if c < 33 || c > 126 {
			b[i] = '_'
		}
	}
	if len(b) > n {
		b = b[:n]
	}
	if len(b) == 0 {
		return "-"
	}
	return string(b)
}

// encode5424 appends the RFC 5424 message of one record (msg, without its
// newline) sent at t to dst, with the given header (" HOST APP PROCID
// MSGID - ").
func encode5424(dst []byte, t time.Time, header, msg []byte) []byte {
	dst = append(dst, syslogPRI...)
	dst = t.UTC().AppendFormat(dst, "2006-01-02T15:04:05.000000Z07:00")
	dst = append(dst, header...)
	return append(dst, msg...)
}

func (o *syslogOutput) dial() error {
	if o.conn != nil {
		return nil
	}
	if o.network == "tcp" && !o.lastDial.IsZero() && time.Since(o.lastDial) < syslogRedial {
		return errors.New("records: syslog: waiting to redial " + o.addr)
	}
	o.lastDial = time.Now()
	c, err := net.DialTimeout(o.network, o.addr, syslogDialTimeout)
	if err != nil {
		return err
	}
	o.conn = c
	return nil
}

// write sends the batch's records one message each; it returns how many
// were lost. A TCP failure closes the connection (redialled later).
func (o *syslogOutput) write(batch []byte, n int) (int, error) {
	sent := 0
	var firstErr error
	now := time.Now()
	for len(batch) > 0 {
		i := bytes.IndexByte(batch, '\n')
		if i < 0 {
			i = len(batch)
		}
		rec := batch[:i]
		batch = batch[min(i+1, len(batch)):]
		if err := o.send(now, rec); err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		sent++
	}
	return max(n-sent, 0), firstErr
}

func (o *syslogOutput) send(now time.Time, rec []byte) error {
	if err := o.dial(); err != nil {
		return err
	}
	msg := encode5424(o.buf[:0], now, o.header, rec)
	var out []byte
	if o.network == "tcp" {
		out = strconv.AppendInt(make([]byte, 0, len(msg)+8), int64(len(msg)), 10)
		out = append(out, ' ')
		out = append(out, msg...)
	} else {
		out = msg
	}
	o.buf = msg[:0]
	_ = o.conn.SetWriteDeadline(time.Now().Add(syslogWriteTimeout))
	if _, err := o.conn.Write(out); err != nil {
		_ = o.conn.Close()
		o.conn = nil
		return err
	}
	return nil
}

func (o *syslogOutput) close() error {
	if o.conn == nil {
		return nil
	}
	err := o.conn.Close()
	o.conn = nil
	return err
}
