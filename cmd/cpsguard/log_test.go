package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// Durations in the JSON log are strings, as in the text log.
func TestLogDurationsAsStrings(t *testing.T) {
	for _, format := range []string{"json", "text"} {
		var buf bytes.Buffer
		log := newLogger(&buf, format, new(slog.LevelVar))
		log.Info("call rejected", "retry_after", 2*time.Second, slog.Group("carrier", "max_wait", 1500*time.Millisecond))
		out := buf.String()
		for _, want := range map[string][]string{
			"json": {`"retry_after":"2s"`, `"max_wait":"1.5s"`},
			"text": {"retry_after=2s", "carrier.max_wait=1.5s"},
		}[format] {
			if !strings.Contains(out, want) {
				t.Errorf("%s log lacks %s: %s", format, want, out)
			}
		}
	}
}
