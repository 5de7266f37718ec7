package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"html"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "dashboard:", err)
		os.Exit(1)
	}
}

// Options are the command's flags.
type Options struct {
	Prometheus   string
	Dashboard    string
	From, To     time.Time
	Step         time.Duration
	RateInterval time.Duration
	Width        int
	Title        string
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("dashboard", flag.ContinueOnError)
	o := Options{}
	fs.StringVar(&o.Prometheus, "prometheus", "http://127.0.0.1:19090", "Prometheus base URL")
	fs.StringVar(&o.Dashboard, "dashboard", "deploy/grafana/cpsguard.json", "Grafana dashboard JSON")
	from := fs.String("from", "", "start of the range (RFC 3339 or Unix seconds; default: 10 minutes before --to)")
	to := fs.String("to", "", "end of the range (RFC 3339 or Unix seconds; default: now)")
	fs.DurationVar(&o.Step, "step", 2*time.Second, "query resolution")
	fs.DurationVar(&o.RateInterval, "rate-interval", 15*time.Second, "the value of $__rate_interval")
	fs.IntVar(&o.Width, "width", 1600, "page width in pixels")
	fs.StringVar(&o.Title, "title", "", "a line above the panels (what was run)")
	out := fs.String("out", "dashboard.html", "the HTML page to write")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var err error
	if o.To, err = parseTime(*to, time.Now()); err != nil {
		return fmt.Errorf("--to: %w", err)
	}
	if o.From, err = parseTime(*from, o.To.Add(-10*time.Minute)); err != nil {
		return fmt.Errorf("--from: %w", err)
	}
	b, err := os.ReadFile(o.Dashboard)
	if err != nil {
		return err
	}
	var d Dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		return fmt.Errorf("%s: %w", o.Dashboard, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	page, height, err := Render(ctx, d, o, &http.Client{Timeout: 30 * time.Second})
	if err != nil {
		return err
	}
	if err := os.WriteFile(*out, []byte(page), 0o644); err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, height)
	return err
}

func parseTime(s string, def time.Time) (time.Time, error) {
	if s == "" {
		return def, nil
	}
	if n, err := strconv.ParseFloat(s, 64); err == nil {
		return time.Unix(0, int64(n*1e9)).UTC(), nil
	}
	return time.Parse(time.RFC3339, s)
}

// Dashboard is what the renderer reads of a Grafana dashboard.
type Dashboard struct {
	Title  string  `json:"title"`
	Panels []Panel `json:"panels"`
}

// Panel is one Grafana panel (a row holds its collapsed panels).
type Panel struct {
	Type    string `json:"type"`
	Title   string `json:"title"`
	GridPos struct {
		H, W, X, Y int
	} `json:"gridPos"`
	FieldConfig struct {
		Defaults struct {
			Unit     string `json:"unit"`
			Mappings []struct {
				Options map[string]struct {
					Text  string `json:"text"`
					Color string `json:"color"`
				} `json:"options"`
			} `json:"mappings"`
			Thresholds struct {
				Steps []struct {
					Color string   `json:"color"`
					Value *float64 `json:"value"`
				} `json:"steps"`
			} `json:"thresholds"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
	Targets []struct {
		Expr         string `json:"expr"`
		LegendFormat string `json:"legendFormat"`
	} `json:"targets"`
	Panels []Panel `json:"panels"`
}

// Series is one line of a panel.
type Series struct {
	Name   string
	Times  []float64 // Unix seconds
	Values []float64 // NaN for a gap
}

var variable = regexp.MustCompile(`\$\{?(job|instance|peer|customer|carrier)\}?`)

// expr replaces the dashboard's variables in a query.
func expr(e string, o Options) string {
	e = strings.ReplaceAll(e, "$__rate_interval", o.RateInterval.String())
	return variable.ReplaceAllString(e, ".*")
}

var legendLabel = regexp.MustCompile(`\{\{\s*(\w+)\s*\}\}`)

// query runs one range query and names its series by legend.
func query(ctx context.Context, c *http.Client, o Options, q, legend string) ([]Series, error) {
	v := url.Values{
		"query": {expr(q, o)},
		"start": {strconv.FormatInt(o.From.Unix(), 10)},
		"end":   {strconv.FormatInt(o.To.Unix(), 10)},
		"step":  {strconv.FormatFloat(o.Step.Seconds(), 'f', -1, 64)},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(o.Prometheus, "/")+"/api/v1/query_range?"+v.Encode(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Values [][2]any          `json:"values"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, fmt.Errorf("query %q: %w", q, err)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("query %q: %s", q, r.Error)
	}
	var out []Series
	for _, res := range r.Data.Result {
		name := legendLabel.ReplaceAllStringFunc(legend, func(m string) string {
			return res.Metric[legendLabel.FindStringSubmatch(m)[1]]
		})
		if name == "" {
			name = fmt.Sprint(res.Metric)
		}
		s := Series{Name: name}
		for _, p := range res.Values {
			t, _ := p[0].(float64)
			str, _ := p[1].(string)
			val, err := strconv.ParseFloat(str, 64)
			if err != nil {
				val = math.NaN()
			}
			s.Times = append(s.Times, t)
			s.Values = append(s.Values, val)
		}
		out = append(out, s)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Grafana's grid: 24 columns, a height unit of 30 px, 8 px between panels.
const (
	rowUnit = 30
	gap     = 8
	header  = 56
)

// palette is Grafana's classic one.
var palette = []string{"#7EB26D", "#EAB839", "#6ED0E0", "#EF843C", "#E24D42", "#1F78C1", "#BA43A9", "#705DA0", "#508642", "#CCA300", "#447EBC", "#C15C17"}

// colors of the dashboard's named colors.
var colors = map[string]string{"green": "#73BF69", "red": "#F2495C", "blue": "#5794F2", "orange": "#FF9830", "yellow": "#FADE2A"}

// Render returns the HTML page of every panel of d and its height.
func Render(ctx context.Context, d Dashboard, o Options, c *http.Client) (string, int, error) {
	var panels []Panel
	var flatten func([]Panel)
	flatten = func(ps []Panel) {
		for _, p := range ps {
			panels = append(panels, p)
			flatten(p.Panels)
		}
	}
	flatten(d.Panels)
	if len(panels) == 0 {
		return "", 0, errors.New("the dashboard has no panels")
	}
	col := float64(o.Width-gap) / 24
	bottom := 0
	var b strings.Builder
	for _, p := range panels {
		x := gap + int(float64(p.GridPos.X)*col)
		y := header + p.GridPos.Y*rowUnit
		w := int(float64(p.GridPos.W)*col) - gap
		h := p.GridPos.H*rowUnit - gap
		bottom = max(bottom, y+h+gap)
		if p.Type == "row" {
			fmt.Fprintf(&b, `<div class="row" style="left:%dpx;top:%dpx;width:%dpx">%s</div>`, x, y, w, html.EscapeString(p.Title))
			continue
		}
		var series []Series
		for _, t := range p.Targets {
			s, err := query(ctx, c, o, t.Expr, t.LegendFormat)
			if err != nil {
				return "", 0, fmt.Errorf("panel %q: %w", p.Title, err)
			}
			series = append(series, s...)
		}
		fmt.Fprintf(&b, `<div class="panel" style="left:%dpx;top:%dpx;width:%dpx;height:%dpx"><div class="title">%s</div>`,
			x, y, w, h, html.EscapeString(p.Title))
		switch p.Type {
		case "stat":
			stat(&b, p, series)
		default:
			timeseries(&b, p, series, o, w, h-26)
		}
		b.WriteString("</div>")
	}
	page := fmt.Sprintf(pageHead, o.Width, bottom, html.EscapeString(d.Title), html.EscapeString(o.Title),
		o.From.UTC().Format("2006-01-02 15:04:05"), o.To.UTC().Format("15:04:05 MST")) + b.String() + "</body></html>\n"
	return page, bottom, nil
}

const pageHead = `<!DOCTYPE html>
<html><head><meta charset="utf-8"><style>
body{margin:0;background:#111217;color:#ccccdc;font:12px "DejaVu Sans",sans-serif;width:%dpx;height:%dpx;position:relative;overflow:hidden}
.top{position:absolute;left:8px;top:8px;right:8px;height:40px;display:flex;align-items:center;gap:16px}
.top b{font-size:17px;color:#fff}.top span{color:#8e8e9a}
.panel{position:absolute;background:#181b1f;border:1px solid #2c3235;border-radius:2px;overflow:hidden}
.title{height:24px;line-height:24px;padding:0 8px;font-weight:600;color:#d8d9da;white-space:nowrap;overflow:hidden}
.row{position:absolute;height:22px;line-height:22px;font-size:14px;font-weight:600;color:#fff;border-bottom:1px solid #2c3235}
.stat{display:flex;gap:4px;padding:0 6px;height:calc(100%% - 30px)}
.stat div{flex:1;display:flex;flex-direction:column;justify-content:center;align-items:center;border-radius:2px;color:#fff}
.stat .v{font-size:22px;font-weight:600}.stat .n{font-size:11px;opacity:.85}
.nodata{color:#8e8e9a;text-align:center;margin-top:40px}
svg text{fill:#8e8e9a;font-size:10px}
</style></head><body>
<div class="top"><b>%s</b><span>%s</span><span>%s – %s</span></div>
`

func stat(b *strings.Builder, p Panel, series []Series) {
	if len(series) == 0 {
		b.WriteString(`<div class="nodata">No data</div>`)
		return
	}
	b.WriteString(`<div class="stat">`)
	for _, s := range series {
		v := lastValue(s)
		text := formatValue(v, p.FieldConfig.Defaults.Unit)
		color := ""
		for _, st := range p.FieldConfig.Defaults.Thresholds.Steps {
			if st.Value == nil || v >= *st.Value {
				color = st.Color
			}
		}
		for _, m := range p.FieldConfig.Defaults.Mappings {
			if mp, ok := m.Options[strconv.FormatFloat(v, 'f', -1, 64)]; ok {
				text, color = mp.Text, mp.Color
			}
		}
		if c, ok := colors[color]; ok {
			color = c
		}
		if color == "" {
			color = colors["green"]
		}
		fmt.Fprintf(b, `<div style="background:%s"><span class="v">%s</span><span class="n">%s</span></div>`,
			color, html.EscapeString(text), html.EscapeString(s.Name))
	}
	b.WriteString(`</div>`)
}

func lastValue(s Series) float64 {
	for i := len(s.Values) - 1; i >= 0; i-- {
		if !math.IsNaN(s.Values[i]) {
			return s.Values[i]
		}
	}
	return math.NaN()
}

func maxValue(s Series) float64 {
	m := math.NaN()
	for _, v := range s.Values {
		if !math.IsNaN(v) && (math.IsNaN(m) || v > m) {
			m = v
		}
	}
	return m
}

// formatValue writes v in a dashboard unit.
func formatValue(v float64, unit string) string {
	switch {
	case math.IsNaN(v):
		return "–"
	case unit == "s":
		switch {
		case v == 0:
			return "0 s"
		case math.Abs(v) < 1:
			return trim(v*1000) + " ms"
		}
		return trim(v) + " s"
	case unit == "reqps":
		return trim(v) + " /s"
	}
	return trim(v)
}

// trim writes v with at most two decimals.
func trim(v float64) string {
	s := strconv.FormatFloat(v, 'f', 2, 64)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	if s == "-0" {
		return "0"
	}
	return s
}

func timeseries(b *strings.Builder, p Panel, series []Series, o Options, w, h int) {
	if len(series) == 0 {
		b.WriteString(`<div class="nodata">No data</div>`)
		return
	}
	const left, right, top = 48, 8, 8
	cols := max(1, (w-left-right)/270) // legend columns
	legendRows := (len(series) + cols - 1) / cols
	legendH := min(legendRows, 5) * 14
	plotW, plotH := w-left-right, h-top-18-legendH
	if plotH < 20 {
		plotH, legendH = h-top-18, 0
	}
	lo, hi := 0.0, 0.0
	for _, s := range series {
		for _, v := range s.Values {
			if !math.IsNaN(v) && !math.IsInf(v, 0) {
				lo, hi = math.Min(lo, v), math.Max(hi, v)
			}
		}
	}
	if hi == lo {
		hi = lo + 1
	}
	hi += (hi - lo) * 0.05
	t0, t1 := float64(o.From.Unix()), float64(o.To.Unix())
	px := func(t float64) float64 { return left + (t-t0)/(t1-t0)*float64(plotW) }
	py := func(v float64) float64 { return top + float64(plotH) - (v-lo)/(hi-lo)*float64(plotH) }
	fmt.Fprintf(b, `<svg width="%d" height="%d">`, w, h)
	for i := 0; i <= 3; i++ {
		v := lo + (hi-lo)*float64(i)/3
		y := py(v)
		fmt.Fprintf(b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#2c3235"/><text x="%d" y="%.1f" text-anchor="end">%s</text>`,
			left, left+plotW, y, y, left-4, y+3, html.EscapeString(formatValue(v, p.FieldConfig.Defaults.Unit)))
	}
	for i := 0; i <= 4; i++ {
		t := t0 + (t1-t0)*float64(i)/4
		anchor := map[int]string{0: "start", 4: "end"}[i]
		if anchor == "" {
			anchor = "middle"
		}
		fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="%s">%s</text>`, px(t), top+plotH+13, anchor,
			time.Unix(int64(t), 0).UTC().Format("15:04:05"))
	}
	for i, s := range series {
		color := palette[i%len(palette)]
		dash, width := "", 1.5
		switch {
		case strings.HasSuffix(s.Name, "limit"):
			dash, width = ` stroke-dasharray="6 4"`, 2
		case strings.HasSuffix(s.Name, "rejected") || s.Name == "failure":
			color = colors["red"]
		}
		var pts []string
		flush := func() {
			if len(pts) > 0 {
				fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="%.1f"%s points="%s"/>`, color, width, dash, strings.Join(pts, " "))
				pts = pts[:0]
			}
		}
		for j, v := range s.Values {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				flush()
				continue
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(s.Times[j]), py(v)))
		}
		flush()
		if legendH > 0 && i/cols < legendH/14 {
			lx := left + (i%cols)*(plotW/cols)
			ly := top + plotH + 18 + (i/cols)*14 + 10
			unit := p.FieldConfig.Defaults.Unit
			fmt.Fprintf(b, `<rect x="%d" y="%d" width="10" height="3" fill="%s"/><text x="%d" y="%d" style="fill:#ccccdc">%s  <tspan style="fill:#8e8e9a">last</tspan> %s <tspan style="fill:#8e8e9a">max</tspan> %s</text>`,
				lx, ly-4, color, lx+14, ly, html.EscapeString(s.Name),
				html.EscapeString(formatValue(lastValue(s), unit)), html.EscapeString(formatValue(maxValue(s), unit)))
		}
	}
	b.WriteString(`</svg>`)
}
