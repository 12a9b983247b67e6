package metrics_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gxfer/gxfer/engine"
	"github.com/gxfer/gxfer/metrics"
)

// An engine's collector registered with a registry of the caller's; a
// scrape (here Gather; over HTTP, metrics.Serve or promhttp) reads the
// engine's counters.
func Example() {
	eng, err := engine.New(engine.Config{})
	if err != nil {
		panic(err)
	}
	defer eng.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewEngineCollector(eng, metrics.ConstLabels(prometheus.Labels{"engine": "main"})))

	src, _ := eng.Alloc(4096, engine.Host)
	dst, _ := eng.Alloc(4096, engine.Host)
	for range 3 {
		if err := eng.CopySync(context.Background(), dst.All(), src.All()); err != nil {
			panic(err)
		}
	}

	mfs, err := reg.Gather()
	if err != nil {
		panic(err)
	}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "gxfer_copies_completed_total", "gxfer_copied_bytes_total":
			m := mf.GetMetric()[0]
			fmt.Printf("%s{engine=%q} %v\n", mf.GetName(), m.GetLabel()[0].GetValue(), m.GetCounter().GetValue())
		}
		if strings.HasPrefix(mf.GetName(), "gxfer_copy_latency") {
			fmt.Println(mf.GetName(), mf.GetType())
		}
	}
	// Output:
	// gxfer_copied_bytes_total{engine="main"} 12288
	// gxfer_copies_completed_total{engine="main"} 3
	// gxfer_copy_latency_seconds HISTOGRAM
}
