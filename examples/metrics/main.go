// Command metrics exports two engines' statistics to Prometheus: a
// registry of its own holds one collector per engine (package metrics,
// told apart by an "engine" label), served at http://ADDR/metrics. The
// engines move data over TCP on 127.0.0.1 (Puts and Gets), then the
// program scrapes its own page and prints a few of the lines a Prometheus
// server would read.
//
//	metrics                         (one run, prints the lines)
//	metrics -listen :9464 -hold     (keeps serving, and moving data, until interrupted)
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gxfer/gxfer/engine"
	"github.com/gxfer/gxfer/metrics"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "serve /metrics at this address")
	hold := flag.Bool("hold", false, "keep serving and moving data until interrupted")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *listen, *hold, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "metrics:", err)
		os.Exit(1)
	}
}

// shown are the metrics the program prints after its traffic.
var shown = []string{
	"gxfer_transport_ops_completed_total", "gxfer_transport_bytes_total",
	"gxfer_endpoint_puts_total", "gxfer_endpoint_gets_total",
	"gxfer_transport_op_latency_seconds_count", "gxfer_transport_op_errors_total",
}

func run(ctx context.Context, listen string, hold bool, out io.Writer) (err error) {
	cfg := engine.Config{Devices: engine.DevicesNone}
	client, err := engine.New(cfg)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, client.Close()) }()
	server, err := engine.New(cfg)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, server.Close()) }()

	reg := prometheus.NewRegistry()
	reg.MustRegister(
		metrics.NewEngineCollector(client, metrics.ConstLabels(prometheus.Labels{"engine": "client"})),
		metrics.NewEngineCollector(server, metrics.ConstLabels(prometheus.Labels{"engine": "server"})),
	)
	srv, err := metrics.Serve(listen, reg)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, srv.Close()) }()
	fmt.Fprintf(out, "serving %s\n", srv.URL())

	ln, err := server.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	ep, err := client.Dial(ctx, "tcp", ln.Addr())
	if err != nil {
		return err
	}
	defer ep.Close()
	sep, err := ln.Accept(ctx)
	if err != nil {
		return err
	}
	defer sep.Close()

	remote, err := server.Alloc(64<<10, engine.Host)
	if err != nil {
		return err
	}
	rk, err := remote.Export()
	if err != nil {
		return err
	}
	local, err := client.Alloc(64<<10, engine.Host)
	if err != nil {
		return err
	}
	traffic := func() error {
		for range 10 {
			if err := ep.PutSync(ctx, local.All(), rk); err != nil {
				return err
			}
		}
		for range 5 {
			if err := ep.GetSync(ctx, local.All(), rk); err != nil {
				return err
			}
		}
		return nil
	}
	if err := traffic(); err != nil {
		return err
	}
	if err := printLines(srv.URL(), out); err != nil {
		return err
	}
	for hold {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
		if err := traffic(); err != nil {
			return err
		}
	}
	return nil
}

// printLines scrapes url (the text format) and prints the client's
// samples of the shown metrics.
func printLines(url string, out io.Writer) error {
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/plain")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		for _, name := range shown {
			if strings.HasPrefix(line, name+"{") && strings.Contains(line, `engine="client"`) && strings.Contains(line, `transport="tcp"`) &&
				(!strings.Contains(line, "kind=") || strings.Contains(line, `kind="peer"`)) {
				fmt.Fprintln(out, line)
			}
		}
	}
	return sc.Err()
}
