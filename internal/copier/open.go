package copier

import (
	"fmt"
	"time"

	"github.com/gxfer/gxfer/dma"
	"github.com/gxfer/gxfer/dma/hlsim"
	"github.com/gxfer/gxfer/internal/gxerr"
)

// Devices says which devices OpenDevices opens.
type Devices struct {
	// Discover opens every Gaudi found under SysRoot; Emulated (when
	// discovery found none, or without Discover) that many emulators of
	// Model.
	Discover bool
	SysRoot  string
	Emulated int
	Model    string // "gaudi2" or "" (Gaudi2), "gaudi1" or "gaudi", "gaudi3"
	// The emulators' settings (hlsim.Config).
	DRAMSize  uint64
	Kernel    string
	CSTimeout time.Duration
}

// OpenDevices opens the devices d asks for.
func (c *Copier) OpenDevices(d Devices) error {
	opts := c.devOptions()
	if d.Discover {
		nodes, err := dma.Discover(d.SysRoot)
		if err != nil {
			c.log.Warn().Err(err).Msg("device discovery failed")
		}
		for _, n := range nodes {
			open := nodeOpener(n) // also its reopening after a reset
			dev, err := open(opts)
			if err != nil {
				return fmt.Errorf("gxfer: open %s: %w", n.Path, err)
			}
			c.addDevice(dev, nil, n, open)
		}
		if len(c.Devs) > 0 {
			return nil
		}
	}
	if d.Emulated <= 0 {
		return nil
	}
	model, err := hlsim.ParseModel(d.Model)
	if err != nil {
		return gxerr.New(gxerr.Invalid, "unknown emulated model "+d.Model, nil)
	}
	for i := 0; i < d.Emulated; i++ {
		sim, err := hlsim.New(hlsim.Config{
			Model:     model,
			DRAMSize:  d.DRAMSize,
			Index:     i,
			Kernel:    d.Kernel,
			CSTimeout: d.CSTimeout,
			Logger:    c.cfg.BaseLogger,
		})
		if err != nil {
			return fmt.Errorf("gxfer: emulated device %d: %w", i, err)
		}
		c.Sims = append(c.Sims, sim)
		open := emulatorOpener(sim) // also its reopening after a reset
		dev, err := open(opts)
		if err != nil {
			return fmt.Errorf("gxfer: open emulated device %d: %w", i, err)
		}
		node := dma.NodeInfo{Index: i, Path: dev.Name(), DeviceType: dev.Model().String(), Driver: "hlsim", Emulated: true}
		c.addDevice(dev, sim, node, open)
	}
	return nil
}
