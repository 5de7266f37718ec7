package stats

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Sliding returns, for every timestamp t (sorted), the number of
// timestamps in (t-w, t]: the calls in the sliding window ending at t.
func Sliding(ts []time.Time, w time.Duration) []int {
	out := make([]int, len(ts))
	i := 0
	for j := range ts {
		for ts[j].Sub(ts[i]) >= w {
			i++
		}
		// Include equal timestamps after j.
		k := j
		for k+1 < len(ts) && ts[k+1].Equal(ts[j]) {
			k++
		}
		out[j] = k - i + 1
	}
	return out
}

// PerSecond counts timestamps (sorted) in consecutive 1 s bins from t0.
func PerSecond(ts []time.Time, t0 time.Time) []int {
	var out []int
	for _, t := range ts {
		b := int(t.Sub(t0) / time.Second)
		if b < 0 {
			continue
		}
		for len(out) <= b {
			out = append(out, 0)
		}
		out[b]++
	}
	return out
}

// Gaps returns the differences between consecutive timestamps (sorted).
func Gaps(ts []time.Time) []time.Duration {
	if len(ts) < 2 {
		return nil
	}
	out := make([]time.Duration, len(ts)-1)
	for i := 1; i < len(ts); i++ {
		out[i-1] = ts[i].Sub(ts[i-1])
	}
	return out
}

// Pct returns the p-th percentile (0..100, nearest rank) of ds; 0 when empty.
func Pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	rank := int(math.Ceil(p/100*float64(len(s)))) - 1
	if rank < 0 {
		rank = 0
	}
	if rank >= len(s) {
		rank = len(s) - 1
	}
	return s[rank]
}

// Max returns the largest of ds (0 when empty).
func Max(ds []time.Duration) time.Duration {
	var m time.Duration
	for i, d := range ds {
		if i == 0 || d > m {
			m = d
		}
	}
	return m
}

// Mean returns the mean of ds (0 when empty).
func Mean(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	var s time.Duration
	for _, d := range ds {
		s += d
	}
	return s / time.Duration(len(ds))
}

// Median returns the median of xs (0 when empty).
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// MedianDur returns the median of ds.
func MedianDur(ds []time.Duration) time.Duration {
	xs := make([]float64, len(ds))
	for i, d := range ds {
		xs[i] = float64(d)
	}
	return time.Duration(Median(xs))
}

// Ms formats d in milliseconds with 3 decimals.
func Ms(d time.Duration) string { return fmt.Sprintf("%.3f", float64(d)/1e6) }

// Table is a result table: printed aligned and written as CSV.
type Table struct {
	Header []string
	Rows   [][]string
}

// Add appends a row; values are formatted with %v.
func (t *Table) Add(vals ...any) {
	row := make([]string, len(vals))
	for i, v := range vals {
		switch x := v.(type) {
		case float64:
			row[i] = trimFloat(x)
		case time.Duration:
			row[i] = Ms(x)
		default:
			row[i] = fmt.Sprint(v)
		}
	}
	t.Rows = append(t.Rows, row)
}

func trimFloat(x float64) string {
	s := fmt.Sprintf("%.3f", x)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	if s == "" || s == "-" {
		return "0"
	}
	return s
}

// Print writes the table aligned to w.
func (t *Table) Print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.Join(t.Header, "\t")+"\t")
	for _, r := range t.Rows {
		fmt.Fprintln(tw, strings.Join(r, "\t")+"\t")
	}
	_ = tw.Flush()
}

// WriteCSV writes the table to path, creating its directory.
func (t *Table) WriteCSV(path string) error {
	return WriteCSV(path, t.Header, t.Rows)
}

// WriteCSV writes header and rows to path, creating its directory.
func WriteCSV(path string, header []string, rows [][]string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write(header)
	_ = w.WriteAll(rows)
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// SlidingGrid samples, every step from `from` to `to`, the number of
// timestamps (sorted) in (t-w, t].
func SlidingGrid(ts []time.Time, w time.Duration, from, to time.Time, step time.Duration) (at []time.Time, n []int) {
	lo, hi := 0, 0
	for t := from; !t.After(to); t = t.Add(step) {
		for hi < len(ts) && !ts[hi].After(t) {
			hi++
		}
		for lo < hi && !ts[lo].After(t.Add(-w)) {
			lo++
		}
		at = append(at, t)
		n = append(n, hi-lo)
	}
	return at, n
}
