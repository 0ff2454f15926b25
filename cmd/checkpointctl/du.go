package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"text/tabwriter"

	"github.com/checkpointd/checkpointd/checkpoint"
)

func runDu(ctx context.Context, a *App, args []string) error {
	fs := newFlagSet(a, "du", "[-n NS | -A]",
		"Shows the storage each session of a namespace (or of all, with -A) uses, and the namespace's total:\n"+
			"the versions it keeps, the raw size of its head (what a restore returns), and STORED, the sum of\n"+
			"the compressed bytes its kept versions' saves added. That is the live stored size the daemon\n"+
			"records per version, not JetStream's blocks on disk (deleted data not yet compacted, replicas,\n"+
			"indexes): for disk use per stream, see the daemon's /metrics. Messages first stored by a version\n"+
			"since pruned are not counted; an image shared by several sessions counts where it was first stored.\n"+
			"It reads every session's history: one request per session.")
	var out outputFlag
	out.register(fs)
	var ns namespaces
	ns.register(fs, "measure")
	c, heads, err := ns.heads(ctx, a, fs, "du", args)
	if err != nil {
		return err
	}
	defer c.Close()
	usage, err := namespaceUsage(ctx, c, heads)
	if err != nil {
		return err
	}
	if out == "json" {
		return writeJSON(a.Stdout, orEmpty(usage))
	}
	return printUsage(a, usage)
}

// nsUsage is du's report of one namespace: its sessions and their sums.
type nsUsage struct {
	Namespace   string                    `json:"namespace"`
	Sessions    []checkpoint.SessionUsage `json:"sessions"`
	Versions    int                       `json:"versions"`
	RawBytes    int64                     `json:"rawBytes"` // of the heads
	StoredBytes int64                     `json:"storedBytes"`
}

// duParallel is how many histories du reads at once: well under the daemon's 16 listings and
// histories in flight, so that du does not crowd out other clients.
const duParallel = 4

// namespaceUsage measures each listed session and groups them by namespace, namespaces and
// sessions in name order. A session deleted since the listing uses nothing any more and is left out.
func namespaceUsage(ctx context.Context, c *checkpoint.Client, heads []checkpoint.Session) ([]nsUsage, error) {
	usages, err := measure(ctx, c, heads)
	if err != nil {
		return nil, err
	}
	byNS := map[string]*nsUsage{}
	for _, u := range usages {
		ns := byNS[u.Key.Namespace]
		if ns == nil {
			ns = &nsUsage{Namespace: u.Key.Namespace}
			byNS[u.Key.Namespace] = ns
		}
		ns.Sessions = append(ns.Sessions, u)
		ns.Versions += u.Versions
		ns.RawBytes += u.RawBytes
		ns.StoredBytes += u.StoredBytes
	}
	var out []nsUsage
	for _, ns := range byNS {
		sort.Slice(ns.Sessions, func(i, j int) bool {
			a, b := ns.Sessions[i].Key, ns.Sessions[j].Key
			return a.Session < b.Session || a.Session == b.Session && a.Agent < b.Agent
		})
		out = append(out, *ns)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Namespace < out[j].Namespace })
	return out, nil
}

// measure reads the usage of every head's session, duParallel at a time, stopping at the first
// error. Sessions deleted since the listing are left out.
func measure(ctx context.Context, c *checkpoint.Client, heads []checkpoint.Session) ([]checkpoint.SessionUsage, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu       sync.Mutex
		out      []checkpoint.SessionUsage
		firstErr error
		wg       sync.WaitGroup
	)
	next := make(chan checkpoint.Key)
	for range duParallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for key := range next {
				u, err := c.Usage(ctx, key)
				mu.Lock()
				switch {
				case errors.Is(err, checkpoint.ErrNotFound):
				case err != nil && firstErr == nil:
					firstErr = fmt.Errorf("session %s: %w", printable(key.String()), err)
					cancel()
				case err == nil:
					out = append(out, u)
				}
				mu.Unlock()
			}
		}()
	}
feed:
	for _, h := range heads {
		select {
		case next <- h.Key:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if firstErr == nil && ctx.Err() != nil {
		firstErr = ctx.Err()
	}
	return out, firstErr
}

func printUsage(a *App, usage []nsUsage) error {
	tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tSESSION\tAGENT\tVERSIONS\tHEAD RAW\tSTORED")
	for _, ns := range usage {
		for _, u := range ns.Sessions {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", printable(ns.Namespace), printable(u.Key.Session), printable(u.Key.Agent),
				u.Versions, size(u.RawBytes), size(u.StoredBytes))
		}
		sessions := fmt.Sprintf("%d sessions", len(ns.Sessions))
		if len(ns.Sessions) == 1 {
			sessions = "1 session"
		}
		fmt.Fprintf(tw, "%s\t(total: %s)\t\t%d\t%s\t%s\n", printable(ns.Namespace), sessions, ns.Versions,
			size(ns.RawBytes), size(ns.StoredBytes))
	}
	return tw.Flush()
}
