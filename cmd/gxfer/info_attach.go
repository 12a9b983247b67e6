package main

import (
	"errors"
	"fmt"

	"github.com/gxfer/gxfer/dma"
	"github.com/gxfer/gxfer/dma/hlsim"
	"github.com/gxfer/gxfer/engine"
)

// attachFlag is info's -attach: "emulated" or "runtime" ("" when not
// given; given empty, it is refused).
type attachFlag struct{ mode string }

func (f *attachFlag) String() string { return f.mode }

func (f *attachFlag) Set(v string) error {
	switch v {
	case "emulated", "runtime":
		f.mode = v
		return nil
	}
	return fmt.Errorf("want emulated or runtime, got %q", v)
}

// emulatedRuntime is an hlsim device with hlsim playing the runtime.
type emulatedRuntime struct {
	sim *hlsim.Device
	rt  *hlsim.Runtime
}

func (r *emulatedRuntime) close() error { return errors.Join(r.rt.Close(), r.sim.Close()) }

// attachInfo attaches eng as -attach asks: to an emulated runtime (which
// it returns, for closing after the engine), or to the runtime of this
// process (FindRuntime; a standalone gxfer has none, and the error says
// why).
func attachInfo(eng *engine.Engine, cfg engine.Config, mode string) (*emulatedRuntime, error) {
	switch mode {
	case "":
		return nil, nil
	case "runtime":
		if _, err := dma.FindRuntime(); err != nil {
			return nil, fmt.Errorf("attach: %w", err)
		}
		return nil, errors.New("attach: the runtime is loaded, but gxfer info cannot know its pool anchor; attach from the application (engine.Attach)")
	}
	model, err := hlsim.ParseModel(cfg.Emulator.Model)
	if err != nil {
		return nil, err
	}
	sim, err := hlsim.New(hlsim.Config{Model: model, DRAMSize: 1 << 30, Kernel: cfg.Emulator.Kernel})
	if err != nil {
		return nil, err
	}
	rt, err := sim.NewRuntime(hlsim.RuntimeConfig{PoolSize: 256 << 20, PoolOffset: 2 << 20})
	if err != nil {
		_ = sim.Close()
		return nil, err
	}
	r := &emulatedRuntime{sim: sim, rt: rt}
	if _, err := eng.Attach(engine.AttachConfig{Target: rt.Target(), Anchor: rt.Anchor(), Copier: rt}); err != nil {
		_ = r.close()
		return nil, err
	}
	return r, nil
}
