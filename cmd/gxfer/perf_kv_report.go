package main

import (
	"fmt"
	"slices"
	"time"
)

// The reports of the KV-cache workload's roles (perf_kv.go).

// maxDropLogs bounds the lines a target writes about the bad
// notifications it drops (a peer may send any number): later ones are
// only counted.
const maxDropLogs = 10

// dropBad logs (the first maxDropLogs) and counts a bad notification from
// a peer: bytes that are no workload message, or one the target cannot
// take. The target drops it and keeps serving its initiators.
func (t *kvTarget) dropBad(st *kvTargetStats, from string, err error) {
	st.dropped++
	if st.dropped <= maxDropLogs {
		fmt.Fprintf(t.out, "# dropped a bad notification from %s: %v\n", from, err)
	}
	if st.dropped == maxDropLogs {
		fmt.Fprintf(t.out, "# further bad notifications are counted only\n")
	}
}

func (t *kvTarget) report(st *kvTargetStats) {
	// The rate needs an interval: from the first notification to the
	// last, so at least two of them, a clock tick apart.
	var rate string
	switch el := st.last.Sub(st.first); {
	case st.reqs == 0:
		rate = "rate not measured (no request)"
	case st.reqs == 1:
		rate = "rate not measured (one notification: no interval)"
	case el <= 0:
		rate = "rate not measured (every notification within one clock tick)"
	default:
		rps := float64(st.reqs-1) / el.Seconds()
		gbs := rps * float64(st.bytes/st.reqs) / 1e9
		rate = fmt.Sprintf("%.1f req/s, %.3f GB/s (GB = 1e9 bytes; first to last notification)", rps, gbs)
	}
	v := "not verified (-verify=false)"
	if t.verify {
		v = fmt.Sprintf("%d verified byte for byte", st.verified)
		if st.failed > 0 {
			v += fmt.Sprintf(", %d FAILED verification", st.failed)
		}
		if st.unfilled > 0 {
			v += fmt.Sprintf(", %d not checked (their initiator ran -verify=false: no pattern to check)", st.unfilled)
		}
	}
	clock := "same-host clock"
	if !t.sameHost {
		clock = "the initiators' clocks against this host's: across hosts, only as good as their sync"
	}
	lat := "post to notified: none"
	if len(st.lat) > 0 {
		lat = fmt.Sprintf("post to notified p50 %s p99 %s (%s)", us(st.lat.q(0.5)), us(st.lat.q(0.99)), clock)
	}
	dropped := ""
	if st.dropped > 0 {
		dropped = fmt.Sprintf(" | %d bad notification(s) dropped", st.dropped)
	}
	fmt.Fprintf(t.out, "target %s: %d requests, %s | %s | %s%s\n", t.label, st.reqs, v, rate, lat, dropped)
}

func (in *kvInitiator) report(el time.Duration, post, rtt latencies) {
	rps := float64(in.requests) / el.Seconds()
	gbs := rps * float64(in.p.requestLen()) / 1e9
	var sum time.Duration
	for _, d := range post {
		sum += d
	}
	fill := ""
	if in.verify {
		fill = " (includes filling the source blocks with the request's pattern; -verify=false: pure transfer)"
	}
	if f := in.foreign.Load(); f > 0 {
		fill += fmt.Sprintf(" | %d notification(s) from other agents dropped", f)
	}
	fmt.Fprintf(in.out, "initiator %s: %d requests in %v: %.1f req/s, %.3f GB/s (GB = 1e9 bytes)%s\n",
		in.label, in.requests, el.Round(time.Microsecond), rps, gbs, fill)
	fmt.Fprintf(in.out, "initiator %s: post of %d descriptors: p50 %s p99 %s mean %s (CPU in Prepared.Write, before it returns) | post to acknowledged p50 %s p99 %s\n",
		in.label, in.p.blocks, us(post.q(0.5)), us(post.q(0.99)), us(sum/time.Duration(max(1, len(post)))), us(rtt.q(0.5)), us(rtt.q(0.99)))
}

// latencies collects durations and gives quantiles.
type latencies []time.Duration

func (l latencies) q(f float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	s := slices.Clone(l)
	slices.Sort(s)
	return s[min(len(s)-1, int(f*float64(len(s))))]
}

func us(d time.Duration) string { return fmt.Sprintf("%.1fus", float64(d)/1e3) }
