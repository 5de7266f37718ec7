package config

import (
	"fmt"
	"strings"
)

// ValidationError lists every problem found in a configuration, each as
// "path: message", e.g. "carriers[1].cps: must be > 0 (got -3)". Load,
// Parse and Manager.Reload return it (as *ValidationError) when the file was
// read but its content is unusable.
type ValidationError struct {
	// File is the file the errors were found in; empty for Parse.
	File string
	// Errors holds one line per problem, in file order: decoding problems
	// (unknown keys, wrong types) first, then rule violations.
	Errors []string
}

// Error joins the problems one per line, after a header naming the file and
// the count.
func (e *ValidationError) Error() string {
	var b strings.Builder
	name := "configuration"
	if e.File != "" {
		name = e.File
	}
	n := len(e.Errors)
	fmt.Fprintf(&b, "%s: %d error", name, n)
	if n != 1 {
		b.WriteString("s")
	}
	for _, line := range e.Errors {
		b.WriteString("\n  ")
		b.WriteString(line)
	}
	return b.String()
}

// errorList collects messages. Paths that failed to decode are remembered so
// that rule checks on the same path (or below it) are skipped: a cps of "abc"
// is reported as "must be a number", not also as "must be > 0".
type errorList struct {
	lines []string
	bad   map[string]bool
}

func (l *errorList) addDecode(path, msg string) {
	if l.bad == nil {
		l.bad = map[string]bool{}
	}
	l.bad[path] = true
	l.add(path, msg)
}

func (l *errorList) add(path, msg string) {
	if path == "" {
		l.lines = append(l.lines, msg)
		return
	}
	l.lines = append(l.lines, path+": "+msg)
}

// failed reports whether path or one of its parents failed to decode.
func (l *errorList) failed(path string) bool {
	for p := path; p != ""; {
		if l.bad[p] {
			return true
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			return false
		}
		p = p[:i]
	}
	return false
}

func (l *errorList) errf(path, format string, args ...any) {
	if l.failed(path) {
		return
	}
	l.add(path, fmt.Sprintf(format, args...))
}
