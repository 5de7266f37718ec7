package config

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
)

// Redacted replaces a secret that is set, wherever a Config is shown.
const Redacted = "REDACTED"

func redact(secret string) string {
	if secret == "" {
		return ""
	}
	return Redacted
}

// String shows the Redis settings with the password redacted, so printing a
// Config with %v or %+v never leaks it.
func (r Redis) String() string {
	return fmt.Sprintf("{Addrs:%v MasterName:%s Username:%s Password:%s DB:%d Timeout:%s}",
		r.Addrs, r.MasterName, r.Username, redact(r.Password), r.DB, r.Timeout)
}

// String shows the HTTP settings with the token redacted.
func (h HTTP) String() string {
	return fmt.Sprintf("{Listen:%s Token:%s}", h.Listen, redact(h.Token))
}

// String shows the SIP settings with the dialog secret redacted.
func (s SIP) String() string {
	return fmt.Sprintf("{Listen:%v Advertise:%s RecordRoute:%t UnknownSource:%s Reject:%+v DialogSecret:%s}",
		s.Listen, s.Advertise, s.RecordRoute, s.UnknownSource, s.Reject, redact(s.DialogSecret))
}

// Redacted returns a copy of c with every secret (store.redis.password,
// http.token, sip.dialog_secret) replaced by [Redacted] when set. Use it whenever a whole Config
// is logged, printed or served.
func (c *Config) Redacted() *Config {
	out := *c
	out.HTTP.Token = redact(c.HTTP.Token)
	out.SIP.DialogSecret = redact(c.SIP.DialogSecret)
	if c.Store.Redis != nil {
		r := *c.Store.Redis
		r.Password = redact(r.Password)
		out.Store.Redis = &r
	}
	return &out
}

// LogValue makes slog log a Config as a short summary without secrets.
func (c *Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("node_id", c.NodeID),
		slog.Int("peers", len(c.Peers)),
		slog.Int("customers", len(c.Customers)),
		slog.Int("carriers", len(c.Carriers)),
		slog.Int("routes", len(c.Routes)),
		slog.String("store", c.storeSummary()),
		slog.Bool("shadow", c.Shadow),
	)
}

// StoreMode is "in-process", "redis", "redis-sentinel" or "redis-cluster".
func (c *Config) StoreMode() string {
	r := c.Store.Redis
	switch {
	case r == nil:
		return "in-process"
	case r.MasterName != "":
		return "redis-sentinel"
	case len(r.Addrs) > 1:
		return "redis-cluster"
	default:
		return "redis"
	}
}

func (c *Config) storeSummary() string {
	r := c.Store.Redis
	if r == nil {
		return "in-process"
	}
	s := fmt.Sprintf("%s %s", c.StoreMode(), strings.Join(r.Addrs, ","))
	if r.MasterName != "" {
		s += " master " + r.MasterName
	}
	return s
}

func fmtCPS(v float64) string { return fmt.Sprintf("%g cps", v) }

// fmtLimits describes a burst and extra windows: " burst 30, 600/1m".
func fmtLimits(burst int, windows []Window) string {
	var b strings.Builder
	if burst > 0 {
		fmt.Fprintf(&b, " burst %d", burst)
	}
	for _, w := range windows {
		fmt.Fprintf(&b, ", %d/%s", w.Calls, fmtPer(w.Per))
	}
	return b.String()
}

// fmtMaxCalls describes a max_calls limit: ", max_calls 50" ("" for none).
func fmtMaxCalls(n int) string {
	if n <= 0 {
		return ""
	}
	return fmt.Sprintf(", max_calls %d", n)
}

// Summary is a short, human-readable description of c for `cpsguard check`
// and logs: counts, names, limits, routes and the store mode. It never
// contains a secret; it only says whether one is set.
func (c *Config) Summary() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w("node_id: %s", c.NodeID)
	dialog := "dialog_secret not set (random per process)"
	if c.SIP.DialogSecret != "" {
		dialog = "dialog_secret set"
	}
	w("sip: listen %s; record_route %t; unknown_source %s; reject %d %q; %s",
		strings.Join(c.SIP.Listen, " "), c.SIP.RecordRoute, c.SIP.UnknownSource,
		c.SIP.Reject.Code, c.SIP.Reject.Reason, dialog)
	store := c.storeSummary()
	if r := c.Store.Redis; r != nil {
		store += fmt.Sprintf(" db %d timeout %s", r.DB, r.Timeout)
		if r.Password != "" {
			store += " (password set)"
		}
	}
	w("store: %s; key_prefix %s; on_error %s", store, c.Store.KeyPrefix, c.Store.OnError)
	httpLine := "http: " + c.HTTP.Listen
	if c.HTTP.Token != "" {
		httpLine += " (token set)"
	}
	w("%s", httpLine)
	if c.Shadow {
		w("shadow: true (would-be rejections are counted, calls admitted)")
	}
	w("peers (%d):", len(c.Peers))
	for _, p := range c.Peers {
		srcs := make([]string, len(p.Sources))
		for i, s := range p.Sources {
			srcs[i] = s.String()
		}
		line := fmt.Sprintf("  %s: %s%s%s from %s", p.Name, fmtCPS(p.CPS), fmtLimits(p.Burst, p.Windows), fmtMaxCalls(p.MaxCalls), strings.Join(srcs, " "))
		if p.Customer != "" {
			line += ", customer " + p.Customer
		}
		if len(p.Customers) > 0 {
			line += ", may name " + strings.Join(p.Customers, " ")
		}
		if p.Route != "" {
			line += ", route " + p.Route
		}
		if p.Shadow {
			line += ", shadow"
		}
		if p.AllowResourcePriority {
			line += ", may claim Resource-Priority"
		}
		w("%s", line)
	}
	w("customers (%d):", len(c.Customers))
	for _, cu := range c.Customers {
		line := fmt.Sprintf("  %s: %s%s%s", cu.Name, fmtCPS(cu.CPS), fmtLimits(cu.Burst, cu.Windows), fmtMaxCalls(cu.MaxCalls))
		if cu.Route != "" {
			line += ", route " + cu.Route
		}
		if cu.Shadow {
			line += ", shadow"
		}
		w("%s", line)
	}
	w("carriers (%d):", len(c.Carriers))
	for _, ca := range c.Carriers {
		line := fmt.Sprintf("  %s: %s%s, max_wait %s, setup_timeout %s", ca.Name, fmtCPS(ca.CPS), fmtMaxCalls(ca.MaxCalls), ca.MaxWait, ca.Setup())
		if pr := ca.Probing(); pr.Interval > 0 {
			line += fmt.Sprintf(", probe every %s (down after %d, up after %d)", pr.Interval, pr.DownAfter, pr.UpAfter)
		} else {
			line += ", probe off"
		}
		if ca.Adaptive {
			o := ca.Overloaded()
			line += fmt.Sprintf(", adaptive (x%g on %v, floor %s, +%g cps/s)", o.Decrease, o.Codes, fmtCPS(o.MinCPS), o.Increase)
		}
		w("%s, %s", line, ca.URI)
	}
	names := make([]string, 0, len(c.Routes))
	for name := range c.Routes {
		names = append(names, name)
	}
	slices.Sort(names)
	w("routes (%d):", len(names))
	for _, name := range names {
		w("  %s: %s", name, routeLine(c.Routes[name]))
	}
	if pr := c.Priority; len(pr.Numbers) > 0 || len(pr.ResourcePriority) > 0 {
		w("priority: numbers %s; resource_priority %s", strings.Join(pr.Numbers, " "), strings.Join(pr.ResourcePriority, " "))
	}
	if len(c.Destinations) > 0 {
		w("destinations (%d):", len(c.Destinations))
		for _, d := range c.Destinations {
			var line string
			if d.CPS > 0 {
				line = fmtCPS(d.CPS)
			}
			line += fmtLimits(d.Burst, d.Windows) + fmtMaxCalls(d.MaxCalls)
			if d.Route != "" {
				line += ", route " + d.Route
			}
			if d.Shadow {
				line += ", shadow"
			}
			w("  %s: %s", d.Prefix, strings.TrimPrefix(line, ", "))
		}
	}
	if r := c.RepeatDial; r.Calls > 0 {
		line := fmt.Sprintf("repeat_dial: %d calls per %s to one number, refused %d %q", r.Calls, fmtPer(r.Per), r.Reject.Code, r.Reject.Reason)
		if r.Shadow {
			line += ", shadow"
		}
		w("%s", line)
	}
	return b.String()
}

// routeLine describes a route: "a -> b" (ordered), "weighted: a 70, b 30",
// "least_wait: a, b".
func routeLine(r Route) string {
	switch r.PolicyName() {
	case RouteOrdered:
		return strings.Join(r.Names(), " -> ")
	case RouteWeighted:
		parts := make([]string, len(r.Carriers))
		for i, rc := range r.Carriers {
			parts[i] = fmt.Sprintf("%s %d", rc.Name, rc.Weight)
		}
		return RouteWeighted + ": " + strings.Join(parts, ", ")
	}
	return r.PolicyName() + ": " + strings.Join(r.Names(), ", ")
}
