package sdnotify

import (
	"net"
	"path/filepath"
	"testing"
	"time"
)

func listen(t *testing.T, name string) *net.UnixConn {
	t.Helper()
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func read(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	if err := c.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4096)
	n, err := c.Read(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(b[:n])
}

func TestNotify(t *testing.T) {
	for _, name := range []string{
		filepath.Join(t.TempDir(), "notify"),
		"@cpsguard-sdnotify-test-" + time.Now().Format("150405.000000000"), // abstract
	} {
		c := listen(t, name)
		t.Setenv("NOTIFY_SOCKET", name)
		sent, err := Notify(Ready, Status("serving"))
		if !sent || err != nil {
			t.Fatalf("%s: Notify = %v, %v; want sent", name, sent, err)
		}
		if got, want := read(t, c), "READY=1\nSTATUS=serving"; got != want {
			t.Errorf("%s: got %q, want %q", name, got, want)
		}
	}
}

func TestNotifyWithoutSocket(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	if sent, err := Notify(Ready); sent || err != nil {
		t.Errorf("Notify without NOTIFY_SOCKET = %v, %v; want false, nil", sent, err)
	}
	t.Setenv("NOTIFY_SOCKET", filepath.Join(t.TempDir(), "nobody-listens"))
	if sent, err := Notify(Ready); sent || err == nil {
		t.Errorf("Notify to a missing socket = %v, %v; want false and an error", sent, err)
	}
}
