package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"runtime"
	"strings"
	"text/tabwriter"

	"github.com/gxfer/gxfer/bench"
	"github.com/gxfer/gxfer/dma"
	"github.com/gxfer/gxfer/engine"
)

func infoUsage(w io.Writer) {
	fmt.Fprint(w, `Usage: gxfer info [flags]

Shows the devices gxfer drives (real or emulated, clearly marked), their
driver generation and ioctl numbering, model, DRAM size and usage, PCI
address and device node; the memory domains and their capabilities; the
transports and why one is unavailable; the cache configuration. Each
device is "owned" (gxfer opened it) or "attached" (the Habana runtime owns
it and lent gxfer its fd and HBM pool; gxfer submits nothing on it).
-attach emulated shows attach mode against an emulated runtime (dma/hlsim
plays SynapseAI: it opens the emulated device and maps the pool, and gxfer
opens no device of its own); -attach runtime looks for the runtime loaded
in this process (libSynapse.so), which a standalone gxfer never has: it
reports why.

Flags:
`)
	fs, _, _ := infoFlags()
	printDefaults(w, fs)
}

func infoFlags() (*flag.FlagSet, *commonFlags, *bool) {
	fs := flag.NewFlagSet("info", flag.ContinueOnError)
	var common commonFlags
	common.register(fs)
	asJSON := fs.Bool("json", false, "write JSON instead of text")
	fs.Var(&attachFlag{}, "attach", "attach mode: emulated (an emulated runtime lends its device) or runtime (the Habana runtime in this process)")
	return fs, &common, asJSON
}

// infoDoc is what gxfer info reports; -json writes it as is.
type infoDoc struct {
	Tool          string          `json:"tool"`
	Env           infoEnv         `json:"env"`
	Devices       []infoDevice    `json:"devices"`
	MemoryDomains []memoryDomain  `json:"memory_domains"`
	Transports    []transportInfo `json:"transports"`
	Endpoints     endpointInfo    `json:"endpoints"`
	Caches        []cacheInfo     `json:"caches"`
	Engine        engineInfo      `json:"engine"`
}

type infoEnv struct {
	GOOS      string `json:"goos"`
	GOARCH    string `json:"goarch"`
	GoVersion string `json:"go_version"`
	CPUs      int    `json:"cpus"`
	Kernel    string `json:"kernel"`
	Devices   string `json:"devices_mode"` // auto, emulated, none
}

type infoDevice struct {
	Name             string `json:"name"` // gaudi0, or attached0
	Index            int    `json:"index"`
	Mode             string `json:"mode"`              // "owned" (gxfer opened it) or "attached" (lent by the runtime)
	LentBy           string `json:"lent_by,omitempty"` // attached: who lent it
	PoolStart        string `json:"pool_start,omitempty"`
	PoolLen          uint64 `json:"pool_len,omitempty"`
	Emulated         bool   `json:"emulated"`
	Emulator         string `json:"emulator,omitempty"` // "dma/hlsim"
	Model            string `json:"model"`
	PCIVendorID      string `json:"pci_vendor_id"`
	PCIDeviceID      string `json:"pci_device_id"`
	PCIAddress       string `json:"pci_address"` // "" when emulated or unknown
	DeviceNode       string `json:"device_node"`
	Driver           string `json:"driver"`
	KernelRelease    string `json:"kernel_release"`
	DriverGeneration string `json:"driver_generation"`
	IoctlNumbering   string `json:"ioctl_numbering"`
	DMABufExportAPI  string `json:"dmabuf_export_api"`
	DRAMBase         string `json:"dram_base"`
	DRAMSize         uint64 `json:"dram_size"`
	DRAMUsed         uint64 `json:"dram_used"`
	DRAMFree         uint64 `json:"dram_free"`
	DRAMPageSize     uint64 `json:"dram_page_size"`
	DMAPath          string `json:"dma_path,omitempty"`    // how copies reach the DMA engines
	DMAEngines       string `json:"dma_engines,omitempty"` // queues (Gaudi3: PDMA channels) per direction
}

type memoryDomain struct {
	Name         string `json:"name"` // host, gaudi0
	Alloc        bool   `json:"alloc"`
	Register     bool   `json:"register"`
	DMABufExport bool   `json:"dmabuf_export"`
	DMABufImport bool   `json:"dmabuf_import"`
	Emulated     bool   `json:"emulated"`
	Notes        string `json:"notes"`
}

type transportInfo struct {
	Name      string `json:"name"`
	Available bool   `json:"available"`
	Reason    string `json:"reason,omitempty"` // why it is unavailable
	Desc      string `json:"desc"`
}

type cacheInfo struct {
	Name       string `json:"name"`
	Scope      string `json:"scope"`
	Enabled    bool   `json:"enabled"`
	MaxRegions int    `json:"max_regions"` // 0: unlimited
	MaxBytes   uint64 `json:"max_bytes"`   // 0: unlimited
	Desc       string `json:"desc"`
}

// endpointInfo is what engine endpoints (Listen/Dial) use.
type endpointInfo struct {
	TCP       string          `json:"tcp"`       // how "tcp" endpoints move data
	TCPLanes  int             `json:"tcp_lanes"` // connections per dialed TCP endpoint
	Selection string          `json:"selection"` // what Dial("tcp") picks
	RDMA      engine.RDMAInfo `json:"rdma"`
}

type engineInfo struct {
	QueueDepth      int    `json:"queue_depth"`
	QueueFull       string `json:"queue_full"`
	Workers         int    `json:"workers"`
	InlineHostMax   int    `json:"inline_host_max"`
	ParallelCopyMin int    `json:"parallel_copy_min"`
	CBSize          int    `json:"cb_size"`
	MaxOpsPerCS     int    `json:"max_ops_per_cs"`
	ChunkSize       uint64 `json:"chunk_size"`
	PollSpinNS      int64  `json:"poll_spin_ns"`
	WaitSpinNS      int64  `json:"wait_spin_ns"`
	CloseGraceNS    int64  `json:"close_grace_ns"`
}

func runInfo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, common, asJSON := infoFlags()
	set, err := parseFlags(fs, args, common)
	if err != nil {
		return err
	}
	attach := fs.Lookup("attach").Value.(*attachFlag).mode
	if attach != "" {
		// The runtime lends its one device; gxfer opens none of its own.
		conflicts := []string{"devices", "emulated"}
		if attach == "runtime" {
			conflicts = append(conflicts, "model", "kernel")
		}
		for _, f := range conflicts {
			if set[f] {
				return usagef("-%s has no meaning with -attach %s (the runtime lends its device; gxfer opens none)", f, attach)
			}
		}
	}
	cfg, err := common.config(stderr)
	if err != nil {
		return err
	}
	if attach != "" {
		cfg.Devices = engine.DevicesNone // the runtime holds the device
	}
	eng, err := openEngine(cfg)
	if err != nil {
		return err
	}
	rt, err := attachInfo(eng, cfg, attach)
	if err != nil {
		_ = eng.Close()
		return err
	}
	mode := common.devices
	if attach != "" {
		mode = "attached (" + attach + ")"
	}
	doc := collectInfo(eng, cfg, mode)
	if err := eng.Close(); err != nil {
		return fmt.Errorf("close engine: %w", err)
	}
	if rt != nil {
		if err := rt.close(); err != nil {
			return fmt.Errorf("close the emulated runtime: %w", err)
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(doc)
	}
	return writeInfoText(stdout, doc)
}

func collectInfo(eng *engine.Engine, cfg engine.Config, mode string) infoDoc {
	doc := infoDoc{
		Tool: "gxfer info",
		Env: infoEnv{
			GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, GoVersion: runtime.Version(),
			CPUs: runtime.NumCPU(), Kernel: bench.KernelRelease(), Devices: strings.ToLower(mode),
		},
		Devices:       []infoDevice{},
		MemoryDomains: []memoryDomain{},
	}
	// Real devices: PCI address and driver come from discovery (sysfs), as
	// the engine does not report them.
	nodes := map[string]dma.NodeInfo{}
	if list, err := dma.Discover(cfg.SysRoot); err == nil {
		for _, n := range list {
			nodes[n.Path] = n
		}
	}
	doc.MemoryDomains = append(doc.MemoryDomains, memoryDomain{
		Name: "host", Alloc: true, Register: true,
		Notes: "page-aligned memory outside the Go heap (Alloc); caller memory through Register and the registration cache",
	})
	for _, d := range eng.Devices() {
		id := infoDevice{
			Name: fmt.Sprintf("gaudi%d", d.Index), Index: d.Index, Mode: "owned", Emulated: d.Emulated, Model: d.Model,
			PCIVendorID: "0x1da3", PCIDeviceID: fmt.Sprintf("%#04x", d.DeviceID),
			DeviceNode: d.Name, IoctlNumbering: d.Numbering, DMABufExportAPI: exportAPIText(d.ExportAPI, d.Numbering),
			DRAMBase: fmt.Sprintf("%#x", d.DRAMBase), DRAMSize: d.DRAMSize, DRAMFree: d.DRAMFree, DRAMPageSize: d.PageSize,
		}
		if d.DRAMSize >= d.DRAMFree {
			id.DRAMUsed = d.DRAMSize - d.DRAMFree
		}
		id.DMAPath = d.DMAPath
		unit := "queues"
		if d.Model == "Gaudi3" {
			unit = "PDMA channels"
		}
		id.DMAEngines = fmt.Sprintf("%s: host-to-device %v, device-to-host %v, device-to-device %v", unit, d.H2DQueues, d.D2HQueues, d.D2DQueues)
		accel := strings.Contains(strings.ToLower(d.Numbering), "accel")
		id.DriverGeneration = "legacy habanalabs char device (kernels up to 6.6): /dev/hlN"
		if accel {
			id.DriverGeneration = "DRM accel (kernels 6.7 and later): /dev/accel/accelN"
		}
		if d.Emulated {
			id.Emulator = "dma/hlsim"
			id.Driver = "habanalabs uAPI emulated by dma/hlsim"
			id.KernelRelease = cfg.Emulator.Kernel
		} else {
			id.Driver = "habanalabs"
			id.KernelRelease = bench.KernelRelease()
			if n, ok := nodes[d.Name]; ok {
				id.PCIAddress = n.PCIAddr
				if n.Driver != "" {
					id.Driver = n.Driver
				}
			}
		}
		if d.Attached {
			id.Name, id.Mode, id.LentBy = fmt.Sprintf("attached%d", d.Index), "attached", d.LentBy
			id.PoolStart, id.PoolLen = fmt.Sprintf("%#x", d.PoolStart), d.PoolLen
			doc.Devices = append(doc.Devices, id)
			doc.MemoryDomains = append(doc.MemoryDomains, memoryDomain{
				Name: id.Name, Register: true, DMABufExport: true, Emulated: d.Emulated,
				Notes: "the runtime's HBM pool (Attachment.Register); exported once as a DMA-BUF, buffers at their offset; device copies by the application's copier, no CS by gxfer",
			})
			continue
		}
		doc.Devices = append(doc.Devices, id)
		notes := "device memory (HBM); DMA-BUF export " + exportAPIText(d.ExportAPI, d.Numbering) + "; the habanalabs driver is export-only (no import, no CPU mmap)"
		if d.Emulated {
			notes = "EMULATED by dma/hlsim; " + notes
		}
		doc.MemoryDomains = append(doc.MemoryDomains, memoryDomain{
			Name: id.Name, Alloc: true, Register: false, DMABufExport: true, DMABufImport: false, Emulated: d.Emulated, Notes: notes,
		})
	}
	bench.NoteRDMA(eng.RDMA()) // perf's rdma transport is available when the engine has RDMA
	for _, t := range bench.Transports() {
		doc.Transports = append(doc.Transports, transportInfo{Name: t.Name, Available: t.Available(), Reason: t.Unavailable, Desc: t.Desc})
	}
	ec := eng.Config()
	doc.Endpoints = endpointInfo{
		TCP:      "Data frames on the connection, landed straight into host memory, Gaudi memory through pipelined staging; heartbeats",
		TCPLanes: ec.TCPLanes,
		RDMA:     eng.RDMA(),
	}
	if doc.Endpoints.RDMA.Available {
		doc.Endpoints.Selection = "rdma when the peer has a usable RDMA device too, else tcp (Config.Transport / WithTransport force either)"
	} else {
		doc.Endpoints.Selection = "tcp: this engine has no usable RDMA device (" + doc.Endpoints.RDMA.Reason + ")"
	}
	rc := cfg.RegCache
	doc.Caches = []cacheInfo{
		{Name: "registration cache", Scope: "per device", Enabled: !rc.Disabled, MaxRegions: rc.MaxRegions, MaxBytes: rc.MaxBytes,
			Desc: "host ranges mapped into the device MMU, reused across copies"},
		{Name: "DMA-BUF export cache", Scope: "per device", Enabled: true,
			Desc: "device ranges exported as DMA-BUF fds, exported once"},
		{Name: "memory-type cache", Scope: "per engine and per device", Enabled: true,
			Desc: "address range -> buffer and memory type"},
	}
	full := "wait for room"
	if cfg.QueueFull == engine.FailWhenFull {
		full = "fail with ErrQueueFull"
	}
	doc.Engine = engineInfo{
		QueueDepth: cfg.QueueDepth, QueueFull: full, Workers: cfg.Workers,
		InlineHostMax: cfg.InlineHostMax, ParallelCopyMin: cfg.ParallelCopyMin, CBSize: cfg.CBSize,
		MaxOpsPerCS: cfg.MaxOpsPerCS, ChunkSize: cfg.ChunkSize,
		PollSpinNS: cfg.PollSpin.Nanoseconds(), WaitSpinNS: cfg.WaitSpin.Nanoseconds(), CloseGraceNS: cfg.CloseGrace.Nanoseconds(),
	}
	return doc
}

// exportAPIText describes the DMA-BUF export form. With legacy numbering
// the {addr, size, offset} form is a 6.3-6.6 driver, which ignores the
// offset (dma.Device.ExportOffsetHonored).
func exportAPIText(api, numbering string) string {
	switch api {
	case dma.ExportAPIAddr:
		if !strings.Contains(strings.ToLower(numbering), "accel") {
			return "{addr, size, offset} (kernels 6.3-6.6: the driver ignores the offset, so gxfer exports from the allocation start and carries it)"
		}
		return "{addr, size, offset} (kernel 6.7 and later)"
	case dma.ExportAPI61:
		return "{handle, size} (kernel 6.1 form)"
	}
	return api
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func limit(n uint64, unit func(uint64) string) string {
	if n == 0 {
		return "unlimited"
	}
	return unit(n)
}

func writeInfoText(w io.Writer, doc infoDoc) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	p := func(format string, args ...any) { fmt.Fprintf(tw, format, args...) }
	e := doc.Env
	p("gxfer info | %s %s/%s | %d CPUs | host kernel %s | -devices %s\n", e.GoVersion, e.GOOS, e.GOARCH, e.CPUs, e.Kernel, e.Devices)

	emulated := 0
	for _, d := range doc.Devices {
		if d.Emulated {
			emulated++
		}
	}
	p("\nDevices: %d open", len(doc.Devices))
	if emulated > 0 {
		p(" (%d EMULATED by dma/hlsim, not real hardware)", emulated)
	}
	p("\n")
	if len(doc.Devices) == 0 {
		p("  none (host memory only)\n")
	}
	for _, d := range doc.Devices {
		kind := "real Gaudi"
		if d.Emulated {
			kind = "EMULATED (dma/hlsim, not a real Gaudi)"
		}
		p("  %s: %s\n", d.Name, kind)
		if d.Mode == "attached" {
			p("    mode\tattached: lent by %s; pool %s, %s; gxfer never closes the fd and submits no CS on it\n", d.LentBy, d.PoolStart, bench.FormatBytes(d.PoolLen))
		} else {
			p("    mode\towned: gxfer opened the device (one compute context per device)\n")
		}
		p("    model\t%s (PCI %s:%s)\n", d.Model, d.PCIVendorID, d.PCIDeviceID)
		node := d.DeviceNode
		if d.Emulated {
			node += ", no /dev node"
		}
		p("    device node\t%s\n", node)
		pci := d.PCIAddress
		if d.Emulated {
			pci = "none (emulated)"
		} else if pci == "" {
			pci = "unknown (sysfs pci_addr unreadable)"
		}
		p("    PCI address\t%s\n", pci)
		p("    driver\t%s, kernel %s\n", d.Driver, d.KernelRelease)
		p("    driver generation\t%s\n", d.DriverGeneration)
		p("    ioctl numbering\t%s\n", d.IoctlNumbering)
		p("    DMA-BUF export API\t%s\n", d.DMABufExportAPI)
		p("    DRAM\t%s at %s: %s used, %s free, page %s\n", bench.FormatBytes(d.DRAMSize), d.DRAMBase,
			bench.FormatBytes(d.DRAMUsed), bench.FormatBytes(d.DRAMFree), bench.FormatBytes(d.DRAMPageSize))
		if d.DMAPath != "" {
			p("    DMA path\t%s\n", d.DMAPath)
			p("    DMA engines\t%s\n", d.DMAEngines)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	p("\nMemory domains:\n")
	p("  domain\talloc\tregister\tDMA-BUF export\tDMA-BUF import\tnotes\n")
	for _, m := range doc.MemoryDomains {
		export := yesNo(m.DMABufExport)
		if m.DMABufExport {
			if m.Emulated {
				export = "yes (emulated)"
			} else {
				export = "yes (real)"
			}
		}
		p("  %s\t%s\t%s\t%s\t%s\t%s\n", m.Name, yesNo(m.Alloc), yesNo(m.Register), export, yesNo(m.DMABufImport), m.Notes)
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	p("\nTransports:\n")
	for _, t := range doc.Transports {
		if t.Available {
			p("  %s: available (%s)\n", t.Name, t.Desc)
		} else {
			p("  %s: unavailable (%s)\n", t.Name, t.Reason)
		}
	}

	ep := doc.Endpoints
	p("\nEndpoints (engine Listen/Dial):\n")
	p("  unix: same node; host memory shared (memfd), Gaudi memory moved by its owner's DMA engine\n")
	p("  tcp: %s; %d connection(s) per dialed endpoint\n", ep.TCP, ep.TCPLanes)
	if r := ep.RDMA; r.Available {
		p("  rdma: %s port %d, %s, GID[%d] %s, MTU %d; Gaudi memory: DMA-BUF %s\n", r.Device, r.Port, r.LinkLayer, r.GIDIndex, r.GID, r.MTU, r.DMABuf)
		if len(r.NICs) > 1 {
			p("  rdma NICs: %s (a queue pair on each NIC both sides have; host transfers of %d KiB or more sliced over them)\n",
				strings.Join(r.NICs, ", "), engine.RDMASliceMin>>10)
		}
	} else {
		p("  rdma: unavailable (%s)\n", r.Reason)
	}
	p("  Dial(\"tcp\") picks: %s\n", ep.Selection)

	p("\nCaches:\n")
	for _, c := range doc.Caches {
		state := "disabled"
		if c.Enabled {
			state = fmt.Sprintf("enabled, max regions %s, max bytes %s",
				limit(uint64(c.MaxRegions), func(n uint64) string { return fmt.Sprint(n) }), limit(c.MaxBytes, bench.FormatBytes))
		}
		p("  %s\t%s\t%s\t(%s)\n", c.Name, c.Scope, state, c.Desc)
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	g := doc.Engine
	p("\nEngine configuration:\n")
	p("  queues\tdepth %d per (device, direction); when full: %s\n", g.QueueDepth, g.QueueFull)
	p("  workers\t%d\n", g.Workers)
	p("  host copies\tup to %s inline in the caller; from %s split across cores\n", bench.FormatBytes(uint64(g.InlineHostMax)), bench.FormatBytes(uint64(g.ParallelCopyMin)))
	p("  device copies\tcommand buffer %s; up to %d copies per CS; split in %s chunks over the DMA queues\n", bench.FormatBytes(uint64(g.CBSize)), g.MaxOpsPerCS, bench.FormatBytes(g.ChunkSize))
	p("  completion\tCQ actor spins %dus before parking; Wait spins %dus; Close grace %ds\n", g.PollSpinNS/1000, g.WaitSpinNS/1000, g.CloseGraceNS/1e9)
	return tw.Flush()
}
