package main

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/checkpointd/checkpointd/checkpoint"
)

func runPrune(ctx context.Context, a *App, args []string) error {
	fs := newFlagSet(a, "prune", "[SESSION]",
		"Removes old versions of SESSION, or of every session in the namespace. The head is always kept,\n"+
			"and restores of kept versions are unaffected. Without --keep-last or --max-age, the daemon's\n"+
			"retention policy for the namespace applies. With both, a version goes only if both would remove it.")
	var k keyFlags
	var out outputFlag
	k.register(fs)
	out.register(fs)
	keep := fs.Int("keep-last", 0, "keep at least the newest N versions of each session")
	age := fs.Duration("max-age", 0, "keep versions younger than this (e.g. 720h)")
	dry := fs.Bool("dry-run", false, "report what would be removed; remove nothing")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return usageErr(fmt.Errorf("prune takes at most one SESSION, got %d arguments", len(pos)))
	}
	if *keep < 0 {
		return usageErr(fmt.Errorf("--keep-last %d: want 0 (no count limit) or more", *keep))
	}
	if *age < 0 {
		return usageErr(fmt.Errorf("--max-age %s: want 0 (no age limit) or more", *age))
	}
	o := checkpoint.PruneOptions{KeepLast: *keep, MaxAge: *age, DryRun: *dry}
	if len(pos) == 1 {
		o.Session, o.Agent = pos[0], k.agent
	}
	c, err := a.connect()
	if err != nil {
		return err
	}
	defer c.Close()
	res, err := c.Prune(ctx, k.namespace, o)
	if err != nil {
		return err
	}
	if out == "json" {
		return writeJSON(a.Stdout, orEmpty(res))
	}
	if len(res) == 0 {
		_, err = fmt.Fprintf(a.Stdout, "nothing to prune\n")
		return err
	}
	tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "SESSION\tAGENT\t%s\tKEPT\n", map[bool]string{true: "WOULD REMOVE", false: "REMOVED"}[*dry])
	for _, r := range res {
		span := fmt.Sprintf("version %d", r.Versions[0])
		if n := len(r.Versions); n > 1 {
			span = fmt.Sprintf("versions %d-%d (%d)", r.Versions[0], r.Versions[n-1], n)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", printable(r.Key.Session), printable(r.Key.Agent), span, r.Kept)
	}
	return tw.Flush()
}
