// Command dashboard draws the panels of cpsguard's Grafana dashboard
// (deploy/grafana/cpsguard.json) as one HTML page, from a running
// Prometheus, so that scripts/dashboard-screenshot.sh can take a picture of
// it with headless Chromium (Grafana is not packaged in Debian).
//
// It reads the dashboard, replaces Grafana's variables (every $job,
// $instance, $peer, $customer and $carrier matches all; $__rate_interval is
// --rate-interval), runs every panel's queries over [--from, --to] with the
// Prometheus HTTP API (query_range), and lays the panels out on
// Grafana's 24-column grid: time series as SVG lines (a series whose name
// ends in "limit" dashed, one ending in "rejected" red, as the dashboard's
// overrides say; the legend gives each series' last and largest value),
// stat panels with their value mappings and thresholds,
// rows as headings. It draws the data it is given, nothing else: a panel
// whose queries return nothing says "No data", as Grafana would. It prints
// the page's height in pixels, for the screenshot's window.
//
// Failure: any error ends it with "dashboard: <error>" on standard error
// and exit status 1, and the page (--out) is written only when every query
// succeeded: a bad flag, a --from or --to that is neither RFC 3339 nor Unix
// seconds, a dashboard that cannot be read or is not JSON or has no panels,
// or one query that fails (Prometheus unreachable, an answer that is not
// JSON or not "success"; each query is bounded by 30 s, the run by 2 min).
// A sample value that is not a number is drawn as a gap.
package main
