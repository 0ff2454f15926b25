package main

import (
	"context"
	"fmt"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/checkpointd/checkpointd/checkpoint"
)

func runHistory(ctx context.Context, a *App, args []string) error {
	fs := newFlagSet(a, "history", "SESSION", "Lists every version of SESSION, oldest first (with --limit N: the newest N).")
	var k keyFlags
	var out outputFlag
	k.register(fs)
	out.register(fs)
	limit := fs.Int("limit", 0, "only the newest N versions (read from the head back: cheap on a long history); 0: every version")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs("history", pos, 1, "SESSION"); err != nil {
		return err
	}
	c, err := a.connect()
	if err != nil {
		return err
	}
	defer c.Close()
	if *limit < 0 {
		return fmt.Errorf("history: --limit %d: want 0 (every version) or more", *limit)
	}
	var versions []checkpoint.Version
	if *limit > 0 {
		versions, err = c.RecentHistory(ctx, k.key(pos[0]), *limit)
		slices.Reverse(versions) // shown oldest first, as the whole history is
	} else {
		versions, err = c.History(ctx, k.key(pos[0]))
	}
	if err != nil {
		return err
	}
	if out == "json" {
		return writeJSON(a.Stdout, versions)
	}
	tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tPARENT\tREASON\tWRITER\tMESSAGES\tRAW\tSTORED\tCREATED\tHASH")
	for _, v := range versions {
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", v.Version, v.Parent, v.Reason, printable(v.Writer),
			v.Counts.Messages, size(v.RawBytes), size(v.StoredBytes), v.Created.Local().Format(time.DateTime), shortHash(v.Hash))
	}
	return tw.Flush()
}
