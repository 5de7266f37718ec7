package main

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// plotLine is one named series.
type plotLine struct {
	name string
	x, y []float64
	dots bool // scatter instead of a line
}

var palette = []color.Color{
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, // blue
	color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}, // red
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}, // green
	color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}, // orange
}

// plotSeries draws lines (and a dashed horizontal limit line when limit >
// 0) into a 10x5 in PNG.
func plotSeries(path, title, xlabel, ylabel string, lines []plotLine, limit float64) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xlabel
	p.Y.Label.Text = ylabel
	p.Add(plotter.NewGrid())
	p.Legend.Top = false
	p.Legend.Left = false
	p.Y.Min = 0
	xmin, xmax, ymax := 0.0, 0.0, 0.0
	for i, l := range lines {
		xy := make(plotter.XYs, len(l.x))
		for j := range l.x {
			xy[j].X, xy[j].Y = l.x[j], l.y[j]
			if l.x[j] < xmin {
				xmin = l.x[j]
			}
			if l.x[j] > xmax {
				xmax = l.x[j]
			}
			ymax = max(ymax, l.y[j])
		}
		c := palette[i%len(palette)]
		if l.dots {
			s, err := plotter.NewScatter(xy)
			if err != nil {
				return err
			}
			s.GlyphStyle.Color = c
			s.GlyphStyle.Radius = vg.Points(1.2)
			s.GlyphStyle.Shape = draw.CircleGlyph{}
			p.Add(s)
			p.Legend.Add(l.name, s)
			continue
		}
		ln, err := plotter.NewLine(xy)
		if err != nil {
			return err
		}
		ln.Color = c
		ln.Width = vg.Points(1.3)
		p.Add(ln)
		p.Legend.Add(l.name, ln)
	}
	if limit > 0 {
		ll, err := plotter.NewLine(plotter.XYs{{X: xmin, Y: limit}, {X: xmax, Y: limit}})
		if err != nil {
			return err
		}
		ll.Color = color.Black
		ll.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		p.Add(ll)
		p.Legend.Add(fmt.Sprintf("limit %g", limit), ll)
	}
	if limit > 0 && p.Y.Max < limit*1.25 {
		p.Y.Max = limit * 1.25
	}
	if p.Y.Max < ymax*1.08 { // headroom above the highest point
		p.Y.Max = ymax * 1.08
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return p.Save(10*vg.Inch, 5*vg.Inch, path)
}
