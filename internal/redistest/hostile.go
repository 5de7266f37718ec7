package redistest

import (
	"bufio"
	"net"
	"strconv"
	"strings"
	"testing"
)

// HugeBulk is a bulk-string header announcing a reply no client can hold:
// go-redis' reader panics in makeslice on it.
const HugeBulk = "$9223372036854775806\r\n"

// StartHostile starts a fake Redis on a free loopback port that answers the
// connection handshake sensibly (HELLO refused, so clients speak RESP2;
// PING, CLIENT, SELECT, AUTH answered, SCRIPT EXISTS "all cached") and
// every other command with HugeBulk. It stops when the test ends. It returns
// the address.
func StartHostile(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("hostile redis: %v", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go serveHostile(c)
		}
	}()
	t.Cleanup(func() { l.Close(); <-done })
	return l.Addr().String()
}

func serveHostile(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	for {
		args, err := readCommand(r)
		if err != nil {
			return
		}
		reply := HugeBulk
		switch strings.ToUpper(args[0]) {
		case "HELLO":
			reply = "-ERR unknown command 'HELLO'\r\n"
		case "PING":
			reply = "+PONG\r\n"
		case "CLIENT", "SELECT", "AUTH":
			reply = "+OK\r\n"
		case "SCRIPT":
			if len(args) > 1 && strings.EqualFold(args[1], "EXISTS") {
				// Every script "cached": the client goes on to run them,
				// and meets HugeBulk there.
				reply = "*" + strconv.Itoa(len(args)-2) + "\r\n" + strings.Repeat(":1\r\n", len(args)-2)
			}
		}
		if _, err := c.Write([]byte(reply)); err != nil {
			return
		}
	}
}

// readCommand reads one RESP array of bulk strings.
func readCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "*")))
	if err != nil || n < 1 || n > 1<<16 {
		return nil, net.ErrClosed
	}
	args := make([]string, 0, n)
	for i := 0; i < n; i++ {
		h, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		size, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(h, "$")))
		if err != nil || size < 0 || size > 1<<24 {
			return nil, net.ErrClosed
		}
		buf := make([]byte, size+2)
		if _, err := ioReadFull(r, buf); err != nil {
			return nil, err
		}
		args = append(args, string(buf[:size]))
	}
	return args, nil
}

func ioReadFull(r *bufio.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
