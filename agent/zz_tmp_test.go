package agent

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/gxfer/gxfer/engine"
)

func TestZZAlt(t *testing.T) {
	ctx := testCtx(t)
	const n, bs = 1000, 64 << 10
	a, _, _, p := benchPair(t, "unix", 2*n*bs, engine.Host)
	src := alloc(t, a.eng, n*bs, engine.Host)
	dc := []Desc{{Local: src.All(), Section: "s"}}
	var ds []Desc
	for i := range n {
		ds = append(ds, Desc{Local: src.Slice(i*bs, bs), Section: "s", Off: ((i * 7) % n) * bs})
	}
	run := func(d []Desc) float64 {
		t0 := time.Now()
		for range 10 {
			if err := p.Write(ctx, d).Wait(ctx); err != nil {
				t.Fatal(err)
			}
		}
		return float64(10*n*bs) / time.Since(t0).Seconds() / 1e9
	}
	run(dc)
	run(ds)
	var rs []float64
	for range 21 {
		c := run(dc)
		l := run(ds)
		rs = append(rs, l/c)
	}
	sort.Float64s(rs)
	fmt.Printf("ZZ median %.3f [%.3f-%.3f]\n", rs[10], rs[0], rs[20])
}
