package safetext

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Escape returns s with every character that could hide or reorder text,
// move the cursor or start a new line written as an escape: \xNN for a
// byte that is not UTF-8, \u00NN for a C0 or C1 control or DEL, \uNNNN for
// a format character (Cf) or a line or paragraph separator (Zl, Zp). A
// backslash is left as it is. s itself is returned when nothing needs
// escaping.
func Escape(s string) string {
	i := firstUnsafe(s)
	if i < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	b.WriteString(s[:i])
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unsafeRune(r):
			if r > 0xffff {
				fmt.Fprintf(&b, `\U%08x`, r)
			} else {
				fmt.Fprintf(&b, `\u%04x`, r)
			}
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// NeedsEscape reports whether Escape would change s.
func NeedsEscape(s string) bool { return firstUnsafe(s) >= 0 }

// firstUnsafe returns the byte index of the first character Escape
// rewrites, or -1.
func firstUnsafe(s string) int {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f {
				return i
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && size == 1) || unsafeRune(r) {
			return i
		}
		i += size
	}
	return -1
}

// unsafeRune reports a rune Escape writes as an escape.
func unsafeRune(r rune) bool {
	switch {
	case r < 0x20 || r == 0x7f:
		return true // C0, DEL
	case r >= 0x80 && r < 0xa0:
		return true // C1
	case r < 0xa0:
		return false
	}
	return unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp)
}

// Handler is a slog.Handler that escapes (Escape) the message and every
// string value of a record before passing it on: attributes of the record
// and of WithAttrs, inside groups, LogValuer results, and the text of
// error values. Other kinds pass unchanged.
type Handler struct {
	inner slog.Handler
}

// NewHandler wraps inner; a Handler is returned as it is (never wrapped
// twice).
func NewHandler(inner slog.Handler) slog.Handler {
	if h, ok := inner.(*Handler); ok {
		return h
	}
	return &Handler{inner: inner}
}

// Logger returns l with its handler wrapped by NewHandler.
func Logger(l *slog.Logger) *slog.Logger {
	if _, ok := l.Handler().(*Handler); ok {
		return l
	}
	return slog.New(NewHandler(l.Handler()))
}

// Enabled reports whether the wrapped handler handles level l.
func (h *Handler) Enabled(ctx context.Context, l slog.Level) bool { return h.inner.Enabled(ctx, l) }

// Handle escapes r's message and attributes and passes the result on. A
// record with nothing to escape is passed as it is.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	dirty := NeedsEscape(r.Message)
	if !dirty {
		r.Attrs(func(a slog.Attr) bool {
			dirty = attrDirty(a)
			return !dirty
		})
	}
	if !dirty {
		return h.inner.Handle(ctx, r)
	}
	nr := slog.NewRecord(r.Time, r.Level, Escape(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		nr.AddAttrs(escapeAttr(a))
		return true
	})
	return h.inner.Handle(ctx, nr)
}

// WithAttrs escapes as and passes them on.
func (h *Handler) WithAttrs(as []slog.Attr) slog.Handler {
	out := make([]slog.Attr, len(as))
	for i, a := range as {
		out[i] = escapeAttr(a)
	}
	return &Handler{inner: h.inner.WithAttrs(out)}
}

// WithGroup escapes the group's name and passes it on.
func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{inner: h.inner.WithGroup(Escape(name))}
}

// attrDirty reports whether escapeAttr would change a.
func attrDirty(a slog.Attr) bool {
	if NeedsEscape(a.Key) {
		return true
	}
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return NeedsEscape(v.String())
	case slog.KindGroup:
		for _, g := range v.Group() {
			if attrDirty(g) {
				return true
			}
		}
	case slog.KindAny:
		if err, ok := v.Any().(error); ok && err != nil {
			return NeedsEscape(err.Error())
		}
	}
	return false
}

// escapeAttr returns a with its key and string values escaped.
func escapeAttr(a slog.Attr) slog.Attr {
	a.Key = Escape(a.Key)
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		if s := v.String(); NeedsEscape(s) {
			v = slog.StringValue(Escape(s))
		}
	case slog.KindGroup:
		g := v.Group()
		out := make([]slog.Attr, len(g))
		for i, x := range g {
			out[i] = escapeAttr(x)
		}
		v = slog.GroupValue(out...)
	case slog.KindAny:
		if err, ok := v.Any().(error); ok && err != nil {
			if s := err.Error(); NeedsEscape(s) {
				v = slog.StringValue(Escape(s))
			}
		}
	}
	a.Value = v
	return a
}
