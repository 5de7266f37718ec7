package sdnotify

import (
	"fmt"
	"net"
	"os"
)

// States a service sends (sd_notify(3)).
const (
	// Ready: start-up is finished; systemctl start returns and units
	// ordered after this one start.
	Ready = "READY=1"
	// Stopping: the service is shutting down (draining).
	Stopping = "STOPPING=1"
)

// Status returns a STATUS= line, shown by systemctl status.
func Status(text string) string { return "STATUS=" + text }

// Notify sends the given lines (e.g. Ready, Status("serving")) in one
// datagram to $NOTIFY_SOCKET. It reports whether it sent; false with a nil
// error when the variable is unset.
func Notify(lines ...string) (bool, error) {
	socket := os.Getenv("NOTIFY_SOCKET")
	if socket == "" {
		return false, nil
	}
	// Go maps a leading "@" to the abstract namespace, as systemd means it.
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: socket, Net: "unixgram"})
	if err != nil {
		return false, fmt.Errorf("sdnotify: %w", err)
	}
	defer conn.Close()
	msg := ""
	for i, l := range lines {
		if i > 0 {
			msg += "\n"
		}
		msg += l
	}
	if _, err := conn.Write([]byte(msg)); err != nil {
		return false, fmt.Errorf("sdnotify: %w", err)
	}
	return true, nil
}
