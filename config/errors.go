package config

import (
	"fmt"
	"strings"
)

// ValidationError lists every problem found in a configuration, each as
// "path: message", e.g. "carriers[1].cps: must be > 0 (got -3)". A value
// set by an environment variable is named by the variable, not the file:
// "CPSGUARD_SIP_REJECT_CODE (sip.reject.code): must be an integer (got
// "busy")". Load, Parse and Manager.Reload return it (as *ValidationError)
// when the file was read but its content is unusable.
type ValidationError struct {
	// File is the file the errors were found in; empty for Parse.
	File string
	// Errors holds one line per problem, in file order: unknown
	// environment variables, then decoding problems (unknown keys, wrong
	// types), then rule violations.
	Errors []string
	// Where holds the place in the file of each of Errors (Where[i] is for
	// Errors[i]): the line of a YAML syntax error, the line and column of
	// the key or list item a problem is about. A zero Position when the
	// problem has no place in the file. Nil in a hand-built error.
	Where []Position
}

// At returns the place in the file of Errors[i] (zero when unknown).
func (e *ValidationError) At(i int) Position {
	if i < 0 || i >= len(e.Where) {
		return Position{}
	}
	return e.Where[i]
}

// Placed returns the problems, each after its place in the file as
// compilers write it ("cpsguard.yaml:7:5: peers[0].cps: must be > 0 (got
// 0)", "FILE:7: " when only the line is known); a problem without a place
// (an environment variable's) as it is. The same lines cpsguard check
// prints, the reload log and the reload API answer with.
func (e *ValidationError) Placed() []string {
	file := e.File
	if file == "" {
		file = "configuration"
	}
	out := make([]string, len(e.Errors))
	for i, line := range e.Errors {
		switch at := e.At(i); {
		case at.Line <= 0:
			out[i] = line
		case at.Column <= 0:
			out[i] = fmt.Sprintf("%s:%d: %s", file, at.Line, line)
		default:
			out[i] = fmt.Sprintf("%s:%d:%d: %s", file, at.Line, at.Column, line)
		}
	}
	return out
}

// Error joins the problems one per line, after a header naming the file and
// the count; a problem with a place in the file starts with it ("line 7,
// column 5: peers[0].cps: must be > 0 (got 0)").
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
	for i, line := range e.Errors {
		b.WriteString("\n  ")
		if at := e.At(i); at.Line > 0 {
			b.WriteString(at.String() + ": ")
		}
		b.WriteString(line)
	}
	return b.String()
}

// errorList collects messages. Paths that failed to decode are remembered so
// that rule checks on the same path (or below it) are skipped: a cps of "abc"
// is reported as "must be a number", not also as "must be > 0".
type errorList struct {
	lines []string
	where []Position
	bad   map[string]bool
	// locate, when set, says where the problem at a path is: in the file,
	// or set by the environment variable it returns.
	locate func(path string) (Position, string)
	// envOnly, when set, returns the environment variables that set keys
	// under a block the file does not have (sorted): the block exists
	// only because of them. Nil when the file has the block.
	envOnly func(block string) []string
	// given, when set, reports whether the file or the environment sets
	// the key at path: a required key left out is "required", not "must
	// be > 0 (got 0)".
	given func(path string) bool
}

// missing reports whether the key at path is known to be set by neither
// the file nor the environment (false when the list cannot tell).
func (l *errorList) missing(path string) bool {
	return l.given != nil && !l.given(path)
}

// envOnlyVars is envOnly's answer, nil when the list has no envOnly.
func (l *errorList) envOnlyVars(block string) []string {
	if l.envOnly == nil {
		return nil
	}
	return l.envOnly(block)
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
		l.addAt(Position{}, msg)
		return
	}
	var at Position
	var env string
	if l.locate != nil {
		at, env = l.locate(path)
	}
	if env != "" {
		l.addAt(Position{}, env+" ("+path+"): "+msg)
		return
	}
	l.addAt(at, path+": "+msg)
}

// addAt records a line with its place in the file.
func (l *errorList) addAt(at Position, line string) {
	l.lines = append(l.lines, line)
	l.where = append(l.where, at)
}

// err returns the ValidationError of the list, nil when it is empty.
func (l *errorList) err() *ValidationError {
	if len(l.lines) == 0 {
		return nil
	}
	return &ValidationError{Errors: l.lines, Where: l.where}
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
