package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rs/zerolog"

	"github.com/gxfer/gxfer/agent/etcdmeta"
	"github.com/gxfer/gxfer/agent/meta"
	"github.com/gxfer/gxfer/bench"
)

func agentsUsage(w io.Writer) {
	fmt.Fprint(w, `Usage: gxfer agents -etcd URL[,URL] [-prefix P] [-json] [-timeout D]

Lists the live gxfer agents (package agent) whose records are in etcd under
the prefix: for each its name, incarnation (the id of this life of the
name: a restarted agent has a new one), record version, unix socket and TCP
address, RDMA NICs, and the named memory sections it offers (name, length,
location: host or gaudiN, labelled when the device is emulated). Nothing
is written to etcd.

An unreachable etcd is an error (exit status 1) naming the endpoints, after
-timeout at most.

-json writes one object (schema "gxfer.agents/v1", stable):
  {"schema": "gxfer.agents/v1", "etcd": [URL...], "prefix": P,
   "agents": [{"name": S, "incarnation": "16 hex digits", "version": N,
               "unix": S, "tcp": "host:port", "nics": [{"device": S, "port": N, "gid": S}],
               "sections": [{"name": S, "length": N, "location": S, "emulated": B}]}]}
Agents are sorted by name, sections by name; "unix" and "tcp" are "" when
the agent has none, "nics" and "sections" [] when empty; "emulated" is
true for a section on an emulated Gaudi (dma/hlsim; false from agents
whose record predates the field). The incarnation is
a string (a 64-bit id does not survive JSON numbers).

Examples:
  gxfer agents -etcd http://10.0.0.1:2379
  gxfer agents -etcd 10.0.0.1:2379,10.0.0.2:2379 -prefix /kv/ -json | jq '.agents[].name'

Flags:
`)
	fs, _ := agentsFlags()
	printDefaults(w, fs)
}

type agentsOpts struct {
	etcd    string
	prefix  string
	json    bool
	timeout time.Duration
}

func agentsFlags() (*flag.FlagSet, *agentsOpts) {
	o := &agentsOpts{}
	fs := flag.NewFlagSet("agents", flag.ContinueOnError)
	fs.StringVar(&o.etcd, "etcd", "", "etcd client `URLs`, comma-separated (http://HOST:PORT; HOST:PORT means http) (required)")
	fs.StringVar(&o.prefix, "prefix", etcdmeta.DefaultPrefix, "key prefix of the agents' records")
	fs.BoolVar(&o.json, "json", false, "write JSON (schema gxfer.agents/v1) instead of a table")
	fs.DurationVar(&o.timeout, "timeout", etcdmeta.DefaultDialTimeout, "how long to wait for etcd")
	return fs, o
}

// parseEtcd parses -etcd: comma-separated URLs, a bare HOST:PORT meaning
// http://HOST:PORT.
func parseEtcd(v string) ([]string, error) {
	if strings.TrimSpace(v) == "" {
		return nil, usagef("-etcd is required (etcd client URLs, e.g. http://10.0.0.1:2379)")
	}
	var eps []string
	for _, s := range strings.Split(v, ",") {
		s = strings.TrimSpace(s)
		if !strings.Contains(s, "://") {
			s = "http://" + s
		}
		u, err := url.Parse(s)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Port() == "" {
			return nil, usagef("bad -etcd URL %q (want http://HOST:PORT or HOST:PORT)", s)
		}
		eps = append(eps, s)
	}
	return eps, nil
}

// agentsJSON is the -json document, schema gxfer.agents/v1.
type agentsJSON struct {
	Schema string      `json:"schema"`
	Etcd   []string    `json:"etcd"`
	Prefix string      `json:"prefix"`
	Agents []agentJSON `json:"agents"`
}

type agentJSON struct {
	Name        string        `json:"name"`
	Incarnation string        `json:"incarnation"`
	Version     uint64        `json:"version"`
	Unix        string        `json:"unix"`
	TCP         string        `json:"tcp"`
	NICs        []nicJSON     `json:"nics"`
	Sections    []sectionJSON `json:"sections"`
}

type nicJSON struct {
	Device string `json:"device"`
	Port   int    `json:"port"`
	GID    string `json:"gid"`
}

type sectionJSON struct {
	Name     string `json:"name"`
	Length   uint64 `json:"length"`
	Location string `json:"location"`
	Emulated bool   `json:"emulated"`
}

const agentsSchema = "gxfer.agents/v1"

// openStore connects to etcd for a command (read-only use: nothing is
// published until Publish).
func openStore(ctx context.Context, eps []string, prefix string, timeout, ttl time.Duration, log zerolog.Logger) (*etcdmeta.Store, error) {
	st, err := etcdmeta.Open(ctx, etcdmeta.Config{
		Endpoints: eps, Prefix: prefix, TTL: ttl,
		DialTimeout: timeout, RequestTimeout: timeout, Logger: log,
	})
	if err != nil {
		return nil, fmt.Errorf("connect to etcd: %w", err)
	}
	return st, nil
}

func runAgents(ctx context.Context, args []string, stdout, _ io.Writer) (err error) {
	fs, o := agentsFlags()
	if _, err := parseFlags(fs, args, nil); err != nil {
		return err
	}
	eps, err := parseEtcd(o.etcd)
	if err != nil {
		return err
	}
	if o.timeout <= 0 {
		return usagef("bad -timeout %v (want a positive duration)", o.timeout)
	}
	if o.prefix == "" {
		return usagef("-prefix must not be empty")
	}
	st, err := openStore(ctx, eps, o.prefix, o.timeout, 0, zerolog.Nop())
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, st.Close()) }()
	recs, err := st.List(ctx)
	if err != nil {
		return fmt.Errorf("list agents: %w", err)
	}
	if o.json {
		return writeAgentsJSON(stdout, eps, st.Prefix(), recs)
	}
	return writeAgentsText(stdout, eps, st.Prefix(), recs)
}

func toAgentsJSON(eps []string, prefix string, recs []meta.Metadata) agentsJSON {
	doc := agentsJSON{Schema: agentsSchema, Etcd: eps, Prefix: prefix, Agents: []agentJSON{}}
	for _, m := range recs {
		a := agentJSON{
			Name: m.Name, Incarnation: fmt.Sprintf("%016x", m.Incarnation), Version: m.Version,
			Unix: m.Unix, TCP: m.TCP, NICs: []nicJSON{}, Sections: []sectionJSON{},
		}
		for _, n := range m.NICs {
			a.NICs = append(a.NICs, nicJSON{Device: n.Device, Port: n.Port, GID: n.GID})
		}
		for _, s := range m.Sections {
			a.Sections = append(a.Sections, sectionJSON{Name: s.Name, Length: s.Len, Location: s.Location, Emulated: s.Emulated})
		}
		doc.Agents = append(doc.Agents, a)
	}
	return doc
}

func writeAgentsJSON(w io.Writer, eps []string, prefix string, recs []meta.Metadata) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(toAgentsJSON(eps, prefix, recs))
}

func orNone(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func writeAgentsText(w io.Writer, eps []string, prefix string, recs []meta.Metadata) error {
	fmt.Fprintf(w, "# etcd %s | prefix %s | %d live agent(s)\n", strings.Join(eps, ","), prefix, len(recs))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "AGENT\tINCARNATION\tVERSION\tUNIX\tTCP\tNICS\tSECTIONS")
	for _, m := range recs {
		var nics []string
		for _, n := range m.NICs {
			nics = append(nics, fmt.Sprintf("%s:%d(%s)", n.Device, n.Port, n.GID))
		}
		fmt.Fprintf(tw, "%s\t%016x\t%d\t%s\t%s\t%s\t%d\n", m.Name, m.Incarnation, m.Version,
			orNone(m.Unix), orNone(m.TCP), orNone(strings.Join(nics, ",")), len(m.Sections))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	any := false
	for _, m := range recs {
		if len(m.Sections) > 0 {
			any = true
		}
	}
	if !any {
		return nil
	}
	fmt.Fprintln(w, "#")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "AGENT\tSECTION\tLENGTH\tBYTES\tLOCATION")
	for _, m := range recs {
		for _, s := range m.Sections {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", m.Name, s.Name, bench.FormatSize(int(s.Len)), s.Len, sectionLabel(s))
		}
	}
	return tw.Flush()
}
