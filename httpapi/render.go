package httpapi

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cpsguard/cpsguard/internal/safetext"
)

// RenderStatus writes st as an aligned table for a terminal: a header line
// (node, store mode, config hash, load time), then the peers, customers,
// destinations (when configured; by prefix, a limit of 0 meaning none) and
// carriers, each with its limit (cps), the calls in its current window, that
// as a percentage of the window's limit, its live calls of max_calls
// (CALLS, when some name has max_calls), a token bucket's level of its
// burst (TOKENS, when some name has a burst), the calls in each extra
// window (WINDOWS, when some name has windows), and for carriers the queued
// calls, the wait of a call reserving now and max_wait. "-" marks a value the node
// could not read. A limit marked * is a live override, described under the
// table. Store read errors follow.
func RenderStatus(w io.Writer, st Status) error {
	var b strings.Builder
	fmt.Fprintf(&b, "node %s   store %s   config %s   loaded %s",
		orDash(st.NodeID), orDash(st.StoreMode), shortHash(st.ConfigHash), st.LoadedAt.UTC().Format(time.DateTime+"Z"))
	if !st.Time.IsZero() && !st.LoadedAt.IsZero() {
		fmt.Fprintf(&b, " (%s ago)", st.Time.Sub(st.LoadedAt).Truncate(time.Second))
	}
	if st.DuplicateNodeID {
		fmt.Fprintf(&b, "\nWARNING: another process runs with node_id %s in the same Redis", orDash(st.NodeID))
	}
	b.WriteString("\n\n")

	// CALLS (active/max_calls) only when some entry has max_calls.
	withCalls := false
	for _, es := range [][]Entry{st.Peers, st.Customers, st.Destinations, st.Carriers} {
		for _, e := range es {
			withCalls = withCalls || e.MaxCalls > 0
		}
	}
	// TOKENS (left/burst) when some entry has a burst; WINDOWS (the extra
	// windows, "1m 412/600") when some has windows.
	withTokens, withWindows := false, false
	for _, es := range [][]Entry{st.Peers, st.Customers, st.Destinations} {
		for _, e := range es {
			withTokens = withTokens || e.Burst > 0
			withWindows = withWindows || len(e.Windows) > 0
		}
	}
	header := []string{"", "LIMIT", "CURRENT", "%", "QUEUED", "WAIT", "MAX WAIT", "STATE", "EFFECTIVE"}
	extra := []string{}
	if withCalls {
		extra = append(extra, "CALLS")
	}
	if withTokens {
		extra = append(extra, "TOKENS")
	}
	if withWindows {
		extra = append(extra, "WINDOWS")
	}
	header = slices.Insert(header, 4, extra...)
	rows := [][]string{}
	section := func(title string, entries []Entry, carrier bool) {
		head := append([]string{title}, header[1:]...)
		rows = append(rows, head)
		if len(entries) == 0 {
			rows = append(rows, []string{"  (none)"})
		}
		for _, e := range entries {
			limit := fmtCPS(e.LimitCPS)
			if title == "DESTINATIONS" && e.LimitCPS == 0 {
				limit = "-" // a destination with no cps: windows or max_calls only
			}
			if e.Override != nil {
				limit += "*" // footnote: the override below the table
			}
			row := []string{"  " + e.Name, limit, fmtInt(e.Current), fmtPercent(e.Percent)}
			if withCalls {
				row = append(row, fmtCalls(e.ActiveCalls, e.MaxCalls))
			}
			if withTokens {
				row = append(row, fmtTokens(e.Tokens, e.Burst, e.Current != nil))
			}
			if withWindows {
				row = append(row, fmtWindows(e.Windows))
			}
			if carrier {
				row = append(row, fmtInt(e.Queued), fmtSeconds(e.WaitSeconds), fmtSeconds(&e.MaxWaitSeconds), fmtState(e), fmtCPSPtr(e.EffectiveCPS))
			} else {
				row = append(row, "", "", "", "", "")
			}
			rows = append(rows, row)
		}
		rows = append(rows, nil)
	}
	section("PEERS", st.Peers, false)
	section("CUSTOMERS", st.Customers, false)
	if len(st.Destinations) > 0 {
		section("DESTINATIONS", st.Destinations, false)
	}
	section("CARRIERS", st.Carriers, true)

	widths := make([]int, len(header))
	for _, r := range rows {
		for i, c := range r {
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	for _, r := range rows {
		var line strings.Builder
		for i, c := range r {
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c))
			if i == 0 {
				line.WriteString(c + pad) // names left-aligned
			} else if header[i] == "WINDOWS" {
				line.WriteString("  " + c + pad) // a list: left-aligned
			} else {
				line.WriteString("  " + pad + c) // figures right-aligned
			}
		}
		b.WriteString(strings.TrimRight(line.String(), " "))
		b.WriteByte('\n')
	}
	if rd := st.RepeatDial; rd != nil {
		line := "repeat dial: at most " + strconv.Itoa(rd.Calls) + " calls to one number in " + fmtPer(rd.PerSeconds)
		if rd.Shadow {
			line += " (shadow: counted, not refused)"
		}
		b.WriteString(line + "\n")
	}
	for _, group := range [][]Entry{st.Peers, st.Customers, st.Carriers} {
		for _, e := range group {
			if e.Override != nil {
				b.WriteString("* override: " + overrideLine(*e.Override, false) + "\n")
			}
		}
	}
	for _, e := range st.Carriers {
		if e.OutOfService != nil {
			b.WriteString("carrier " + e.Name + " is out of service: " + serviceLine(*e.OutOfService) + "\n")
		}
		if a := e.ASR; a != nil && a.OutUntil != nil {
			b.WriteString("carrier " + e.Name + " is out of service on this node until " + a.OutUntil.UTC().Format(time.DateTime+"Z") + ": " + printable(a.Reason) + "\n")
		}
		if e.Up != nil && !*e.Up {
			b.WriteString("carrier " + e.Name + " is down: " + printable(e.Health) + "\n")
		}
		if e.Pause != nil {
			b.WriteString("carrier " + e.Name + " is " + pauseLine(*e.Pause) + "\n")
		}
	}
	if len(st.Errors) > 0 {
		b.WriteString("store errors:\n")
		for _, e := range st.Errors {
			b.WriteString("  " + e + "\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// shortHash shows the first 12 hex digits of "sha256:<hex>".
func shortHash(h string) string {
	h = strings.TrimPrefix(h, "sha256:")
	if len(h) > 12 {
		h = h[:12]
	}
	return orDash(h)
}

func fmtCPS(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

func fmtInt(p *int) string {
	if p == nil {
		return "-"
	}
	return strconv.Itoa(*p)
}

func fmtPercent(p *float64) string {
	if p == nil {
		return "-"
	}
	return strconv.FormatFloat(*p, 'f', 0, 64) + "%"
}

func fmtSeconds(p *float64) string {
	if p == nil {
		return "-"
	}
	return time.Duration(*p * float64(time.Second)).Round(time.Millisecond).String()
}

// fmtUp renders a carrier's health: "up", "down", or "-" when unknown.
func fmtUp(up *bool) string {
	switch {
	case up == nil:
		return "-"
	case *up:
		return "up"
	}
	return "down"
}

// fmtState renders a carrier's state: its health, or "paused" /
// "half-open" while it is up and paused by its Retry-After.
func fmtState(e Entry) string {
	if e.InService != nil && !*e.InService {
		return "out"
	}
	if e.Pause != nil && (e.Up == nil || *e.Up) {
		if e.Pause.HalfOpen {
			return "half-open"
		}
		return "paused"
	}
	return fmtUp(e.Up)
}

// pauseLine describes a pause: "paused until 2026-11-24 09:50:00Z (42s
// left): Retry-After 600 in a 503 to several peers, paused 1m0s", or,
// once the span is over, "half-open since …: one call tries it".
func pauseLine(p CarrierPause) string {
	var b strings.Builder
	if p.HalfOpen {
		b.WriteString("half-open (paused since " + p.Since.UTC().Format(time.DateTime+"Z") + "): one call tries it")
		if p.Probing {
			b.WriteString(", under way")
		}
	} else {
		left := time.Duration(p.SecondsLeft * float64(time.Second)).Truncate(time.Second)
		b.WriteString("paused until " + p.Until.UTC().Format(time.DateTime+"Z") + " (" + left.String() + " left)")
	}
	if p.Reason != "" {
		b.WriteString(": " + printable(p.Reason))
	}
	return b.String()
}

// RenderPauseChange writes the answer of DELETE
// /api/v1/carriers/{name}/pause: "pause lifted: carrier a was paused
// until …".
func RenderPauseChange(w io.Writer, c PauseChange) error {
	line := "pause lifted: carrier " + printable(c.Carrier)
	if c.Previous != nil {
		line += " was " + pauseLine(*c.Previous)
	}
	_, err := io.WriteString(w, line+"\ncalls go to it again\n")
	return err
}

// fmtCPSPtr renders an optional rate; "-" when unknown.
func fmtCPSPtr(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmtCPS(*v)
}

// fmtTokens shows a token bucket's level as left/burst ("18/30"), "-/30"
// when it could not be read, "" without a burst.
func fmtTokens(tokens *int, burst int, read bool) string {
	if burst <= 0 {
		return ""
	}
	if tokens == nil || !read {
		return "-/" + strconv.Itoa(burst)
	}
	return strconv.Itoa(*tokens) + "/" + strconv.Itoa(burst)
}

// fmtWindows shows the extra windows as "1m 412/600, 24h 9000/20000"
// (calls in the window of its limit; "-" when unread).
func fmtWindows(ws []WindowState) string {
	parts := make([]string, len(ws))
	for i, w := range ws {
		parts[i] = fmtPer(w.PerSeconds) + " " + fmtInt(w.Current) + "/" + strconv.Itoa(w.Calls)
	}
	return strings.Join(parts, ", ")
}

// fmtPer writes a window length compactly: 24h, 1m, 90s, 1.5s.
func fmtPer(sec float64) string {
	d := time.Duration(sec * float64(time.Second))
	switch {
	case d >= time.Hour && d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	case d >= time.Minute && d%time.Minute == 0:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	}
	return d.String()
}

// fmtCalls shows active/max calls, "-" without max_calls.
func fmtCalls(active *int, limit int) string {
	if limit <= 0 {
		return "-"
	}
	return fmtInt(active) + "/" + strconv.Itoa(limit)
}

// overrideLine describes one override on one line: "peer dialer-1 cps 20
// (configured 50) until 2026-11-24 09:50:00Z (59m59s left), set by
// 127.0.0.1:40312"; for an override that ended (removed), "(was until …)".
func overrideLine(o LimitOverride, ended bool) string {
	var b strings.Builder
	b.WriteString(o.Scope + " " + o.Name + " cps " + fmtCPS(o.CPS))
	if o.Burst != nil {
		b.WriteString(" burst " + strconv.Itoa(*o.Burst))
	}
	if o.Ignored == "" {
		b.WriteString(" (configured " + fmtCPS(o.ConfiguredCPS))
		if o.Burst != nil {
			b.WriteString(" burst " + strconv.Itoa(o.ConfiguredBurst))
		}
		b.WriteString(")")
	}
	if ended {
		b.WriteString(" (was until " + o.Until.UTC().Format(time.DateTime+"Z") + ")")
	} else {
		left := time.Duration(o.TTLSeconds * float64(time.Second)).Truncate(time.Second)
		b.WriteString(" until " + o.Until.UTC().Format(time.DateTime+"Z") + " (" + left.String() + " left)")
	}
	if o.SetBy != "" {
		b.WriteString(", set by " + o.SetBy)
	}
	if o.Ignored != "" {
		b.WriteString(" [ignored: not configured]")
	}
	return b.String()
}

// RenderLimits writes the live overrides of l for a terminal, one per
// line as overrideLine puts them, or "no limit overrides".
func RenderLimits(w io.Writer, l LimitList) error {
	var b strings.Builder
	if len(l.Overrides) == 0 {
		b.WriteString("no limit overrides\n")
	}
	for _, o := range l.Overrides {
		b.WriteString(overrideLine(o, false) + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// RenderLimitChange writes the answer of a PUT or DELETE of one override:
// "override set: …" (and "replaced: …") or "override removed: …" followed
// by the limit in force again.
func RenderLimitChange(w io.Writer, c LimitChange) error {
	var b strings.Builder
	if c.Override != nil {
		b.WriteString("override set: " + overrideLine(*c.Override, false) + "\n")
		if c.Previous != nil {
			b.WriteString("replaced: " + overrideLine(*c.Previous, true) + "\n")
		}
	} else if p := c.Previous; p != nil {
		b.WriteString("override removed: " + overrideLine(*p, true) + "\n")
		if p.Ignored == "" {
			b.WriteString(p.Scope + " " + p.Name + " is back at its configured cps " + fmtCPS(p.ConfiguredCPS))
			if p.ConfiguredBurst > 0 {
				b.WriteString(" burst " + strconv.Itoa(p.ConfiguredBurst))
			}
			b.WriteString("\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// printable keeps a node's text (a health reason quoting a carrier's
// answer) from driving the operator's terminal or reordering the table:
// controls and Unicode format characters are escaped (safetext.Escape).
func printable(s string) string { return safetext.Escape(s) }

// serviceLine describes a carrier out of service: "since 2026-11-24
// 09:50:00Z, by 10.0.0.5:51000: maintenance window".
func serviceLine(o CarrierService) string {
	line := "since " + o.Since.UTC().Format(time.DateTime+"Z")
	if o.By != "" {
		line += ", by " + printable(o.By)
	}
	if o.Reason != "" {
		line += ": " + printable(o.Reason)
	}
	return line
}

// RenderServiceChange writes the answer of PUT or DELETE
// /api/v1/carriers/{name}/service for a terminal.
func RenderServiceChange(w io.Writer, c ServiceChange) error {
	var b strings.Builder
	if c.Status == "out_of_service" {
		b.WriteString("carrier " + printable(c.Carrier) + " is out of service for the pool: calls skip it")
		if c.OutOfService != nil && c.OutOfService.Reason != "" {
			b.WriteString(" (" + printable(c.OutOfService.Reason) + ")")
		}
		b.WriteString("\n")
		if c.Previous != nil {
			b.WriteString("it was out of service already, " + serviceLine(*c.Previous) + "\n")
		}
	} else {
		if c.Previous == nil {
			b.WriteString("carrier " + printable(c.Carrier) + " was in service: nothing changed\n")
		} else {
			b.WriteString("carrier " + printable(c.Carrier) + " is back in service for the pool (out " + serviceLine(*c.Previous) + ")\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
