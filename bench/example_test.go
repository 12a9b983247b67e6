package bench_test

import (
	"context"
	"fmt"

	"github.com/gxfer/gxfer/bench"
	"github.com/gxfer/gxfer/engine"
)

// Measure host-to-Gaudi copies of 4 KiB on an emulated device, then print
// the result as a table, as JSON or in the Go benchmark format.
func Example() {
	eng, err := engine.New(engine.Config{Devices: engine.DevicesEmulated})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer eng.Close()

	env := &bench.Env{Engine: eng, Device: 0}
	tests, err := bench.TestsFor(env, "h2d")
	if err != nil {
		fmt.Println(err)
		return
	}
	rep, err := bench.Run(context.Background(), env, tests, bench.Params{
		Sizes:      []int{4 << 10},
		Iterations: 200,
		Warmup:     10,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	// rep.WriteText(os.Stdout) prints the table; WriteJSON, WriteCSV,
	// WriteBenchfmt and SavePlot give the other formats.
	r := rep.Results[0]
	fmt.Println(r.Test, bench.FormatSize(r.Size), r.Device, "emulated:", r.Emulated)
	fmt.Println("iterations:", r.Iterations, "verified:", r.Verified, "moved bytes:", r.BandwidthMBs > 0)
	// r.CPU: this process's CPU time over the run, per iteration.
	fmt.Println("CPU per copy measured:", r.CPU != nil && r.CPU.UserUs+r.CPU.SysUs > 0)
	// Output:
	// h2d 4KiB gaudi0 emulated: true
	// iterations: 200 verified: true moved bytes: true
	// CPU per copy measured: true
}

// Time something with the harness's clock, as bench/rdmafloor times its
// rounds: the TSC where it is usable, else the monotonic clock.
func ExampleNewClock() {
	clk, err := bench.NewClock(bench.ClockAuto)
	if err != nil {
		fmt.Println(err)
		return
	}
	t0 := clk.Now()
	sum := 0
	for i := range 1000 {
		sum += i
	}
	d := clk.Duration(clk.Now() - t0)
	fmt.Println(sum, d >= 0)
	// Output: 499500 true
}
