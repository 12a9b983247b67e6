package bench

import (
	"bytes"
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// PlotFormat returns the plot format for a file name: "svg" or "png".
func PlotFormat(path string) (string, error) {
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".svg":
		return "svg", nil
	case ".png":
		return "png", nil
	default:
		return "", fmt.Errorf("plot file %q: unsupported extension %q (want .svg or .png)", path, ext)
	}
}

// SavePlot writes the plot of the report to path; the extension (.svg or
// .png) picks the format. The file is written whole or not at all.
func (r *Report) SavePlot(path string) error {
	format, err := PlotFormat(path)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := r.WritePlot(&buf, format); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after the rename this fails harmlessly
	if _, err := tmp.Write(buf.Bytes()); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// Plot size: two panels side by side.
const (
	plotWidth  = 11 * vg.Inch
	plotHeight = 5 * vg.Inch
)

// testColors keeps a test's color the same across runs and files.
var testColors = map[string]color.Color{
	"h2d": color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, // blue
	"d2h": color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}, // orange
	"d2d": color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}, // green
	"h2h": color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}, // red
}

// WritePlot draws bandwidth and latency against message size, one line per
// test, in one image of two panels, as "svg" or "png".
func (r *Report) WritePlot(w io.Writer, format string) error {
	if len(r.Results) == 0 {
		return errors.New("plot: no results")
	}
	bw, err := r.panel("Bandwidth, MB/s (MB = 2^20 bytes)", "MB/s", func(x Result) float64 { return x.BandwidthMBs })
	if err != nil {
		return err
	}
	// Each test has its latency kind (put_lat one-way, bandwidth tests
	// per copy with -O): one kind names the panel, several each line.
	kinds := map[string]LatencyKind{}
	mixed := false
	for _, x := range r.Results {
		kinds[x.Test] = x.LatencyKind
		mixed = mixed || x.LatencyKind != r.Results[0].LatencyKind
	}
	latTitle := "Latency: median " + r.Results[0].LatencyKind.plotLabel() + ", µs"
	latLegend := func(test string) string { return test }
	if mixed {
		latTitle = "Latency: median, µs"
		latLegend = func(test string) string { return test + ": " + kinds[test].plotLabel() }
	}
	lat, err := r.panelNamed(latTitle, "µs", func(x Result) float64 { return x.Latency.Median }, latLegend)
	if err != nil {
		return err
	}

	var c vg.CanvasWriterTo
	switch format {
	case "svg":
		c = vgsvg.New(plotWidth, plotHeight)
	case "png":
		c = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(plotWidth, plotHeight), vgimg.UseDPI(110), vgimg.UseBackgroundColor(color.White))}
	default:
		return fmt.Errorf("plot: unsupported format %q (want svg or png)", format)
	}
	dc := draw.New(c)
	// Title line, then the two panels.
	title := draw.TextStyle{
		Color: color.Black, Font: font.From(plot.DefaultFont, 13),
		XAlign: draw.XCenter, YAlign: draw.YTop, Handler: plot.DefaultTextHandler,
	}
	dc.FillText(title, vg.Point{X: plotWidth / 2, Y: plotHeight - 6}, r.plotTitle())
	// Below the title, the two panels side by side, with a margin.
	const titleH, margin = 26, 8
	left := draw.Crop(dc, margin, -plotWidth/2, margin, -titleH)
	right := draw.Crop(dc, plotWidth/2+margin, -margin, margin, -titleH)
	bw.Draw(left)
	lat.Draw(right)
	_, err = c.WriteTo(w)
	return err
}

func (r *Report) plotTitle() string {
	devs := plotDevices(nil, "", r.Env.Devices)
	if pe := r.PeerEnv; pe != nil {
		// The peer's devices are in the path of tests on its Gaudi memory.
		devs = plotDevices(devs, "peer ", pe.Devices)
	}
	if len(devs) == 0 {
		devs = []string{"no Gaudi (host only)"}
	}
	p := r.Params
	return fmt.Sprintf("gxfer perf, transport %s, %s, window %d, batch %d, %s %s/%s %d CPUs",
		p.Transport, strings.Join(devs, ", "), p.Window, p.Batch, r.Env.GoVersion, r.Env.GOOS, r.Env.GOARCH, r.Env.CPUs)
}

// plotDevices appends each device of ds to devs, prefixed by who, as
// "gaudi0 gaudi2 (EMULATED)" or "(real)".
func plotDevices(devs []string, who string, ds []DeviceEnv) []string {
	for _, d := range ds {
		kind := "real"
		if d.Emulated {
			kind = "EMULATED"
		}
		devs = append(devs, fmt.Sprintf("%sgaudi%d %s (%s)", who, d.Index, d.Model, kind))
	}
	return devs
}

// plotLabel says what a latency of the kind is, for the plot.
func (k LatencyKind) plotLabel() string {
	switch k {
	case PerOp:
		return "time per copy"
	case OneWay:
		return "one-way (half a round trip)"
	}
	return "round trip"
}

// panel builds one panel: value against size, log-log, one line per test
// (the median over repetitions when -count is above 1).
func (r *Report) panel(title, ylabel string, value func(Result) float64) (*plot.Plot, error) {
	return r.panelNamed(title, ylabel, value, func(test string) string { return test })
}

// panelNamed is panel with each test's legend entry given by legend.
func (r *Report) panelNamed(title, ylabel string, value func(Result) float64, legend func(test string) string) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "message size"
	p.Y.Label.Text = ylabel
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.Legend.Top, p.Legend.Left = true, true
	p.Add(plotter.NewGrid())

	xmin, xmax := math.Inf(1), math.Inf(-1)
	ymin, ymax := math.Inf(1), math.Inf(-1)
	for i, name := range r.testOrder() {
		bySize := map[int][]float64{}
		var sizes []int
		for _, x := range r.Results {
			if x.Test != name {
				continue
			}
			if v := value(x); v > 0 && !math.IsInf(v, 0) && !math.IsNaN(v) {
				if _, ok := bySize[x.Size]; !ok {
					sizes = append(sizes, x.Size)
				}
				bySize[x.Size] = append(bySize[x.Size], v)
			}
		}
		if len(sizes) == 0 {
			continue
		}
		slices.Sort(sizes)
		pts := make(plotter.XYs, len(sizes))
		for k, s := range sizes {
			pts[k].X, pts[k].Y = float64(s), median(bySize[s])
			xmin, xmax = math.Min(xmin, pts[k].X), math.Max(xmax, pts[k].X)
			ymin, ymax = math.Min(ymin, pts[k].Y), math.Max(ymax, pts[k].Y)
		}
		line, points, err := plotter.NewLinePoints(pts)
		if err != nil {
			return nil, err
		}
		col, ok := testColors[name]
		if !ok {
			col = plotutil.Color(i)
		}
		line.Color, line.Width = col, vg.Points(1.8)
		points.Color, points.Shape, points.Radius = col, plotutil.Shape(i), vg.Points(3)
		p.Add(line, points)
		p.Legend.Add(legend(name), line, points)
	}
	if math.IsInf(xmin, 0) {
		return nil, errors.New("plot: no positive values to plot")
	}
	// Log axes need a range: widen single points, pad the rest a little.
	p.X.Min, p.X.Max = xmin/1.4, xmax*1.4
	if ymin == ymax {
		ymin, ymax = ymin/2, ymax*2
	}
	p.Y.Min, p.Y.Max = ymin/1.5, ymax*1.5
	p.X.Tick.Marker = sizeTicks{}
	p.Y.Tick.Marker = logTicks{}
	return p, nil
}

// testOrder lists the tests of the results in the order they ran.
func (r *Report) testOrder() []string {
	var out []string
	for _, x := range r.Results {
		if !slices.Contains(out, x.Test) {
			out = append(out, x.Test)
		}
	}
	return out
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// sizeTicks marks powers of two of a size axis, labelling at most about 8
// of them (8B, 1KiB, 64KiB, 1MiB...).
type sizeTicks struct{}

func (sizeTicks) Ticks(lo, hi float64) []plot.Tick {
	a, b := int(math.Ceil(math.Log2(lo))), int(math.Floor(math.Log2(hi)))
	a = max(a, 0)
	if b < a {
		return []plot.Tick{{Value: lo, Label: FormatSize(int(lo))}}
	}
	step := 1
	for (b-a)/step > 8 {
		step *= 2
	}
	var ticks []plot.Tick
	for e := a; e <= b && e < 62; e++ {
		t := plot.Tick{Value: math.Ldexp(1, e)}
		if e%step == 0 {
			t.Label = FormatSize(1 << e)
		}
		ticks = append(ticks, t)
	}
	return ticks
}

// logTicks labels 1, 2 and 5 times powers of ten over short ranges, and
// powers of ten only over long ones.
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	if lo <= 0 || hi <= lo {
		return nil
	}
	e0, e1 := int(math.Floor(math.Log10(lo))), int(math.Ceil(math.Log10(hi)))
	few := e1-e0 <= 3
	var ticks []plot.Tick
	for e := e0; e <= e1; e++ {
		base := math.Pow10(e)
		for m := 1; m < 10; m++ {
			v := base * float64(m)
			if v < lo || v > hi {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 || few && (m == 2 || m == 5) {
				t.Label = tickLabel(v)
			}
			ticks = append(ticks, t)
		}
	}
	return ticks
}

func tickLabel(v float64) string {
	switch {
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'g', 3, 64) + "M"
	case v >= 1e3:
		return strconv.FormatFloat(v/1e3, 'g', 3, 64) + "k"
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}
