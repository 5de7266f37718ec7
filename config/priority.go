package config

import (
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Priority names the calls that no limit refuses: not a peer's, customer's
// or destination's cps, burst, windows or max_calls, not repeat_dial, not
// the node's overload shedding. They are still counted in every window and
// place they pass (a flood of them shows, and takes the room of other
// calls), logged, counted in cpsguard_priority_calls_total, and sent to a
// carrier ahead of the calls waiting for its slots.
type Priority struct {
	// Numbers are called-number prefixes (the Request-URI's user, visual
	// separators - . ( ) removed, as NormalizeNumber does) of emergency
	// calls, e.g. 911, 112, 999. Whoever dials them, they are priority. A
	// prefix matches the number as dialled: one without a leading '+'
	// matches only numbers without one, so 911 does not match +91 1…
	// (India); write +… to match numbers in international form. A prefix
	// also matches every longer number: 911 matches 9111234567 (an Indian
	// mobile number in national form), and such calls pass every limit.
	// An entry ending in '$' (911$) matches that number exactly and no
	// longer one: the safer form where peers dial national numbers.
	Numbers []string `cfg:"numbers"`
	// ResourcePriority are RFC 4412 namespaces (esnet, ets, wps, …,
	// case-insensitive): a call whose Resource-Priority header holds a
	// value namespace.priority of one of them is priority, when its peer
	// has allow_resource_priority.
	ResourcePriority []string `cfg:"resource_priority"`
}

// Destination is a limit (and optionally a route) for the calls whose
// called number starts with Prefix, pool-wide: every call to the prefix,
// whoever sends it, counts against it. The longest matching prefix wins;
// a call matching none has no destination limit.
type Destination struct {
	// Prefix is matched against the called number (the Request-URI's
	// user, NormalizeNumber) with a leading '+' removed from both: "+44"
	// and "44" are one prefix and match +4420… and 4420… alike. A number
	// dialled with a trunk or international access code (0044…, 011…) or
	// a peer's tech prefix is matched as written.
	Prefix string `cfg:"prefix"`
	// CPS is the limit of admitted calls per rolling second to the
	// prefix (0 = none).
	CPS float64 `cfg:"cps"`
	// Burst, when > 0, replaces the 1 s window with a token bucket of
	// rate CPS and capacity Burst (>= CPS; needs cps).
	Burst int `cfg:"burst"`
	// Windows are extra rolling windows, all of which must hold (with or
	// without cps).
	Windows []Window `cfg:"windows"`
	// MaxCalls caps the live calls to the prefix, pool-wide (0 = none).
	MaxCalls int `cfg:"max_calls"`
	// Route, when set, is the route of the calls to the prefix, before
	// their customer's and peer's.
	Route string `cfg:"route"`
	// Shadow is as on Peer, for this destination's limits.
	Shadow bool `cfg:"shadow"`
	// Reject, when set, is the answer to a call this destination's limits
	// refuse, instead of sip.reject or sip.reject_calls.
	Reject *Reject `cfg:"reject"`
}

// RepeatDial bounds the calls to any one called number: at most Calls
// admitted calls to the same number (NormalizeNumber, '+' removed) in any
// rolling Per, pool-wide, whoever sends them. Calls 0 turns it off.
type RepeatDial struct {
	// Calls is the most calls to one number in any interval of length Per
	// (0 = off).
	Calls int `cfg:"calls"`
	// Per is the window's length (1s to 24h).
	Per time.Duration `cfg:"per"`
	// Shadow counts would-be refusals and admits the calls anyway.
	Shadow bool `cfg:"shadow"`
	// Reject is the answer to a refused call: by default 486 Busy Here,
	// the answer of a busy callee, which a dialer takes as final for this
	// attempt rather than trying another route or node, as it would a 503.
	Reject Reject `cfg:"reject"`
}

// DefaultRepeatDial is repeat_dial when the file does not set it (off).
var DefaultRepeatDial = RepeatDial{Per: time.Minute, Reject: Reject{Code: 486, Reason: "Repeat Dial Limit"}}

// NormalizeNumber is a called number as limits and priority match it: the
// user part of the Request-URI up to its first ';' (user parameters such
// as ;npdi, or a tel URI's ;phone-context), without the visual separators
// of RFC 3966 ('-', '.', '(' and ')'). A leading '+' is kept.
func NormalizeNumber(user string) string {
	if i := strings.IndexByte(user, ';'); i >= 0 {
		user = user[:i]
	}
	if strings.IndexAny(user, "-.()") < 0 {
		return user
	}
	var b strings.Builder
	b.Grow(len(user))
	for i := 0; i < len(user); i++ {
		switch c := user[i]; c {
		case '-', '.', '(', ')':
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// DestinationNumber is a normalised number (NormalizeNumber) as
// destinations and repeat_dial match it: without its leading '+'.
func DestinationNumber(n string) string { return strings.TrimPrefix(n, "+") }

// MaxNumberPrefix is the longest prefix of priority.numbers and
// destinations (E.164 numbers have at most 15 digits; the bound leaves
// room for access and tech prefixes).
const MaxNumberPrefix = 32

// PriorityExactMark ends an entry of priority.numbers that matches its
// number exactly rather than as a prefix.
const PriorityExactMark = "$"

// PriorityExact splits an entry of priority.numbers into whether it
// matches exactly (it ends in PriorityExactMark) and its number.
func PriorityExact(entry string) (exact bool, number string) {
	if n, ok := strings.CutSuffix(entry, PriorityExactMark); ok {
		return true, n
	}
	return false, entry
}

// numberRe is a normalised number prefix: digits, '*' and '#', with an
// optional leading '+'.
var numberRe = regexp.MustCompile(`^\+?[0-9*#]{1,32}$`)

// namespaceRe is an RFC 4412 namespace (a token; the registered ones are
// letters, digits and '-').
var namespaceRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9-]{0,31}$`)

// numberPrefix checks one number prefix at path and returns it normalised.
func (v *validator) numberPrefix(path, p string) (string, bool) {
	n := NormalizeNumber(p)
	if strings.ContainsRune(p, ';') || !numberRe.MatchString(n) {
		v.errf(path, "must be 1-%d digits, '*' or '#', with an optional leading '+' (separators - . ( ) are ignored) (got %q)", MaxNumberPrefix, p)
		return "", false
	}
	return n, true
}

func (v *validator) priority() {
	pr := v.c.Priority
	seen := map[string]int{}
	for i, n := range pr.Numbers {
		path := fmt.Sprintf("priority.numbers[%d]", i)
		exact, n := PriorityExact(n)
		norm, ok := v.numberPrefix(path, n)
		if !ok {
			continue
		}
		if exact {
			norm += PriorityExactMark // 911$ and 911 are two entries
		}
		if j, dup := seen[norm]; dup {
			v.errf(path, "duplicate of priority.numbers[%d] (%q): separators - . ( ) are ignored", j, pr.Numbers[j])
			continue
		}
		seen[norm] = i
	}
	ns := map[string]int{}
	for i, n := range pr.ResourcePriority {
		path := fmt.Sprintf("priority.resource_priority[%d]", i)
		if !namespaceRe.MatchString(n) {
			v.errf(path, "must be an RFC 4412 namespace like esnet or ets: 1-32 letters, digits or '-' (got %q)", n)
			continue
		}
		if j, dup := ns[strings.ToLower(n)]; dup {
			v.errf(path, "duplicate of priority.resource_priority[%d] (%q)", j, pr.ResourcePriority[j])
			continue
		}
		ns[strings.ToLower(n)] = i
	}
}

func (v *validator) destinations() {
	seen := map[string]int{}
	for i, d := range v.c.Destinations {
		path := fmt.Sprintf("destinations[%d]", i)
		if norm, ok := v.numberPrefix(path+".prefix", d.Prefix); ok {
			key := DestinationNumber(norm)
			if j, dup := seen[key]; dup {
				v.errf(path+".prefix", "duplicate of destinations[%d].prefix (%q): a leading '+' does not make another prefix", j, v.c.Destinations[j].Prefix)
			} else {
				seen[key] = i
			}
		}
		cpsOK := d.CPS == 0 || v.cps(path+".cps", d.CPS)
		if d.Burst != 0 && d.CPS == 0 {
			v.errf(path+".burst", "needs cps: a burst is a token bucket refilled at cps")
		} else {
			v.limits(path, d.CPS, cpsOK, d.Burst, d.Windows)
		}
		v.maxCalls(path+".max_calls", d.MaxCalls)
		v.route(path+".route", d.Route)
		if d.Reject != nil {
			v.reject(path+".reject", *d.Reject)
		}
		if d.CPS == 0 && len(d.Windows) == 0 && d.MaxCalls == 0 && d.Route == "" {
			v.errf(path, "sets nothing: give it cps, windows, max_calls or a route")
		}
	}
}

func (v *validator) repeatDial() {
	r := v.c.RepeatDial
	switch {
	case r.Calls < 0:
		v.errf("repeat_dial.calls", "must be >= 0 (0 = off) (got %d)", r.Calls)
	case r.Calls > MaxWindowCalls:
		v.errf("repeat_dial.calls", "must be <= %d (got %d)", MaxWindowCalls, r.Calls)
	}
	if r.Per < MinWindowPer || r.Per > MaxWindowPer {
		v.errf("repeat_dial.per", "must be between %s and %s (got %s)", fmtPer(MinWindowPer), fmtPer(MaxWindowPer), r.Per)
	}
	v.reject("repeat_dial.reject", r.Reject)
}
