// Package sdnotify tells systemd the state of a Type=notify service, as
// sd_notify(3) does: one datagram of "KEY=value" lines to the unix socket
// named by $NOTIFY_SOCKET (a path, or an abstract name starting with "@").
// No cgo, no dependency.
//
// Without $NOTIFY_SOCKET (not under systemd, or another Type) Notify does
// nothing and reports false, so callers call it unconditionally. A send that
// fails is returned and never fatal: systemd then only learns the state late
// (at its start timeout). Safe for concurrent use.
package sdnotify
