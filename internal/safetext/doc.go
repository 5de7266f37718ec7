// Package safetext makes untrusted text (a carrier's reason phrase, a
// peer's Call-ID or header value, a status line shown in a terminal) safe
// to log and to print: Escape writes every character that could change how
// the line reads as a visible escape — C0 and C1 controls and DEL, Unicode
// format characters (category Cf: the bidirectional overrides, embeddings
// and isolates U+202A–U+202E and U+2066–U+2069, zero-width characters,
// the byte-order mark, soft hyphen), line and paragraph separators, and
// bytes that are not UTF-8. Handler applies Escape to every string a
// slog record carries, so no log line of the process shows such text raw.
//
// Escape never fails and returns its argument unchanged (no allocation)
// when there is nothing to escape. Everything here is safe for concurrent
// use.
package safetext
