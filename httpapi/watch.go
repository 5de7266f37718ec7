package httpapi

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"time"
)

// ClearScreen moves the cursor home and clears an ANSI terminal.
const ClearScreen = "\033[H\033[2J"

// fetchTimeout bounds one status fetch of the client.
const fetchTimeout = 5 * time.Second

// PrintStatus fetches the status of the node at addr and renders it to w.
func PrintStatus(ctx context.Context, w io.Writer, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	st, err := FetchStatus(ctx, addr)
	if err != nil {
		return err
	}
	return RenderStatus(w, st)
}

// Watch clears the screen and prints the status of addr every interval until
// ctx is done, then returns nil. A failed fetch is shown in place of the
// table and retried at the next tick. Each frame is written in one Write so
// the screen does not flicker.
func Watch(ctx context.Context, w io.Writer, addr string, every time.Duration) error {
	return watch(ctx, w, addr, every, func(b *bytes.Buffer) { b.WriteString(ClearScreen) })
}

// WatchPlain is Watch for a writer that is not a terminal (a pipe, a file,
// a log): no screen codes; each frame starts with a line "--- " and the
// time (RFC 3339, UTC), and frames follow one another.
func WatchPlain(ctx context.Context, w io.Writer, addr string, every time.Duration) error {
	return watch(ctx, w, addr, every, func(b *bytes.Buffer) {
		fmt.Fprintf(b, "--- %s\n", time.Now().UTC().Format(time.RFC3339))
	})
}

// watch is Watch and WatchPlain: head starts each frame.
func watch(ctx context.Context, w io.Writer, addr string, every time.Duration, head func(*bytes.Buffer)) error {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		var buf bytes.Buffer
		head(&buf)
		if err := PrintStatus(ctx, &buf, addr); err != nil {
			fmt.Fprintf(&buf, "cpsguard status: %v\n(retrying every %s; Ctrl-C to quit)\n", err, every)
		}
		if ctx.Err() != nil {
			return nil
		}
		if _, err := w.Write(buf.Bytes()); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}
