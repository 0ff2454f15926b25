package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/checkpointd/checkpointd/checkpoint"
)

func runShow(ctx context.Context, a *App, args []string) error {
	fs := newFlagSet(a, "show", "SESSION", "Shows one version's record (default: the head): key, lineage, hash, sizes and message counts.")
	var k keyFlags
	var out outputFlag
	var version versionFlag
	k.register(fs)
	out.register(fs)
	fs.Var(&version, "version", "version to show (default: the head)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs("show", pos, 1, "SESSION"); err != nil {
		return err
	}
	c, err := a.connect()
	if err != nil {
		return err
	}
	defer c.Close()
	v, err := c.Get(ctx, k.key(pos[0]), version.n)
	if err != nil {
		return err
	}
	if out == "json" {
		return writeJSON(a.Stdout, v)
	}
	tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
	n := v.Counts
	for _, row := range [][2]string{
		{"namespace", printable(v.Key.Namespace)},
		{"session", printable(v.Key.Session)},
		{"agent", printable(v.Key.Agent)},
		{"version", fmt.Sprintf("%d (parent %d)", v.Version, v.Parent)},
		{"hash", v.Hash},
		{"created", v.Created.Local().Format(time.RFC3339)},
		{"reason", v.Reason},
		{"writer", printable(v.Writer)},
		{"save id", printable(v.SaveID)},
		{"size", fmt.Sprintf("%s raw, %s newly stored", size(v.RawBytes), size(v.StoredBytes))},
		{"messages", fmt.Sprintf("%d: %d user, %d assistant, %d toolResult, %d extension", n.Messages, n.User, n.Assistant, n.ToolResult, n.Extension)},
		{"tool calls", fmt.Sprint(n.ToolCalls)},
		{"forked from", forkedFrom(v)},
		{"copied in", copiedIn(v)},
	} {
		if row[1] == "" {
			continue
		}
		fmt.Fprintf(tw, "%s:\t%s\n", row[0], row[1])
	}
	return tw.Flush()
}

func forkedFrom(v checkpoint.Version) string {
	if v.ForkOf == nil {
		return ""
	}
	return fmt.Sprintf("%s version %d", printable(v.ForkOf.Key.String()), v.ForkOf.Version)
}

func copiedIn(v checkpoint.Version) string {
	if v.Origin == nil {
		return ""
	}
	return fmt.Sprintf("by %s from %s at %s", v.Origin.Via, printable(v.Origin.Source), v.Origin.At.Local().Format(time.RFC3339))
}
