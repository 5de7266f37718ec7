package httpapi

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// RenderStatus writes st as an aligned table for a terminal: a header line
// (node, store mode, config hash, load time), then the peers, customers and
// carriers, each with its limit (cps), the calls in its current window, that
// as a percentage of the window's limit, and for carriers the queued calls,
// the wait of a call reserving now and max_wait. "-" marks a value the node
// could not read. Store read errors follow the table.
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

	header := []string{"", "LIMIT", "CURRENT", "%", "QUEUED", "WAIT", "MAX WAIT", "STATE", "EFFECTIVE"}
	rows := [][]string{}
	section := func(title string, entries []Entry, carrier bool) {
		head := append([]string{title}, header[1:]...)
		rows = append(rows, head)
		if len(entries) == 0 {
			rows = append(rows, []string{"  (none)"})
		}
		for _, e := range entries {
			row := []string{"  " + e.Name, fmtCPS(e.LimitCPS), fmtInt(e.Current), fmtPercent(e.Percent)}
			if carrier {
				row = append(row, fmtInt(e.Queued), fmtSeconds(e.WaitSeconds), fmtSeconds(&e.MaxWaitSeconds), fmtUp(e.Up), fmtCPSPtr(e.EffectiveCPS))
			} else {
				row = append(row, "", "", "", "", "")
			}
			rows = append(rows, row)
		}
		rows = append(rows, nil)
	}
	section("PEERS", st.Peers, false)
	section("CUSTOMERS", st.Customers, false)
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
			} else {
				line.WriteString("  " + pad + c) // figures right-aligned
			}
		}
		b.WriteString(strings.TrimRight(line.String(), " "))
		b.WriteByte('\n')
	}
	for _, e := range st.Carriers {
		if e.Up != nil && !*e.Up {
			b.WriteString("carrier " + e.Name + " is down: " + e.Health + "\n")
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

// fmtCPSPtr renders an optional rate; "-" when unknown.
func fmtCPSPtr(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmtCPS(*v)
}
