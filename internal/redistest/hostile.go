package redistest

import (
	"bufio"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// HugeBulk is a bulk-string header announcing a reply no client can hold:
// go-redis' reader panics in makeslice on it.
const HugeBulk = "$9223372036854775806\r\n"

// StartFake starts a fake Redis on a free loopback port whose reply to
// each command (its arguments, the command first) is reply's: raw RESP,
// "" for the handshake's usual answer (HELLO refused, so clients speak
// RESP2; PING, CLIENT, SELECT, AUTH answered) and an error for anything
// else. It serves each connection in a goroutine, stops when the test
// ends, and returns its address.
func StartFake(t testing.TB, reply func(args []string) string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("fake redis: %v", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go serveFake(c, reply)
		}
	}()
	t.Cleanup(func() { l.Close(); <-done })
	return l.Addr().String()
}

func serveFake(c net.Conn, reply func(args []string) string) {
	defer c.Close()
	r := bufio.NewReader(c)
	for {
		args, err := readCommand(r)
		if err != nil {
			return
		}
		out := reply(args)
		if out == "" {
			switch strings.ToUpper(args[0]) {
			case "HELLO":
				out = "-ERR unknown command 'HELLO'\r\n"
			case "PING":
				out = "+PONG\r\n"
			case "CLIENT", "SELECT", "AUTH":
				out = "+OK\r\n"
			default:
				out = "-ERR unknown command\r\n"
			}
		}
		if _, err := c.Write([]byte(out)); err != nil {
			return
		}
	}
}

// StartHostile starts a fake Redis (StartFake) that answers the connection
// handshake sensibly, SCRIPT EXISTS with "all cached", and every other
// command with HugeBulk.
func StartHostile(t testing.TB) string {
	t.Helper()
	return StartFake(t, func(args []string) string { return hostileReply(args, "", "") })
}

// StartHostileCluster is StartHostile as the one master of a Redis
// Cluster (CLUSTER SLOTS names it for every slot): go-redis runs the
// commands of a cluster on clients of its own, per node. With cached
// false its SCRIPT EXISTS answers with HugeArray (a client loading the
// scripts meets it); with cached true it answers "all cached", and the
// scripts' runs meet HugeBulk.
func StartHostileCluster(t testing.TB, cached bool) string {
	t.Helper()
	exists := HugeArray
	if cached {
		exists = ""
	}
	var slots atomic.Pointer[string] // its own port, known once it listens
	addr := StartFake(t, func(args []string) string { return hostileReply(args, *slots.Load(), exists) })
	_, port, _ := net.SplitHostPort(addr)
	reply := "*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:" + port + "\r\n"
	slots.Store(&reply)
	return addr
}

// HugeArray is an array header announcing more elements than any client
// can hold.
const HugeArray = "*9223372036854775806\r\n"

// ScriptsCached is the reply to SCRIPT EXISTS args that says every script
// asked for is cached.
func ScriptsCached(args []string) string {
	n := max(len(args)-2, 0)
	return "*" + strconv.Itoa(n) + "\r\n" + strings.Repeat(":1\r\n", n)
}

// hostileReply is StartHostile's reply, and StartHostileCluster's when
// slots (its CLUSTER SLOTS reply) is set; exists is the reply to SCRIPT
// EXISTS ("": every script cached).
func hostileReply(args []string, slots, exists string) string {
	switch strings.ToUpper(args[0]) {
	case "HELLO", "PING", "CLIENT", "SELECT", "AUTH":
		return ""
	case "CLUSTER":
		if slots != "" {
			return slots
		}
	case "SCRIPT":
		if exists != "" {
			return exists
		}
		if len(args) > 1 && strings.EqualFold(args[1], "EXISTS") {
			// Every script "cached": the client goes on to run them, and
			// meets HugeBulk there.
			return ScriptsCached(args)
		}
	}
	return HugeBulk
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
