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

// StartHostileCluster is StartHostile as the one master of a Redis
// Cluster (CLUSTER SLOTS names it for every slot): go-redis runs the
// commands of a cluster on clients of its own, per node. With cached
// false its SCRIPT EXISTS answers with HugeArray (a client loading the
// scripts meets it); with cached true it answers "all cached", and the
// scripts' runs meet HugeBulk.
func StartHostileCluster(t testing.TB, cached bool) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("hostile cluster: %v", err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	slots := "*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:" + port + "\r\n"
	exists := HugeArray
	if cached {
		exists = ""
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go serveHostileAs(c, slots, exists)
		}
	}()
	t.Cleanup(func() { l.Close(); <-done })
	return l.Addr().String()
}

// HugeArray is an array header announcing more elements than any client
// can hold.
const HugeArray = "*9223372036854775806\r\n"

func serveHostile(c net.Conn) { serveHostileAs(c, "", "") }

// serveHostileAs serves one connection of StartHostile, or of
// StartHostileCluster when slots (its CLUSTER SLOTS reply) is set; exists
// is the reply to SCRIPT EXISTS ("": every script cached).
func serveHostileAs(c net.Conn, slots, exists string) {
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
		case "CLUSTER":
			if slots != "" {
				reply = slots
			}
		case "SCRIPT":
			if exists != "" {
				reply = exists
			} else if len(args) > 1 && strings.EqualFold(args[1], "EXISTS") {
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
