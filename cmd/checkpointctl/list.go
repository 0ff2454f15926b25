package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/checkpointd/checkpointd/checkpoint"
)

func runList(ctx context.Context, a *App, args []string) error {
	fs := newFlagSet(a, "list", "", "Lists the sessions of a namespace (or of all, with -A) and their head versions.")
	var out outputFlag
	out.register(fs)
	namespace := fs.String("namespace", "default", "namespace to list")
	fs.StringVar(namespace, "n", "default", "short for --namespace")
	all := fs.Bool("A", false, "list every namespace")
	fs.BoolVar(all, "all-namespaces", false, "list every namespace")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs("list", pos, 0, "no arguments"); err != nil {
		return err
	}
	c, err := a.connect()
	if err != nil {
		return err
	}
	defer c.Close()
	var heads []checkpoint.Session
	if *all {
		heads, err = c.ListAll(ctx)
	} else {
		heads, err = c.List(ctx, *namespace)
	}
	if err != nil {
		return err
	}
	if out == "json" {
		return writeJSON(a.Stdout, orEmpty(heads))
	}
	tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tSESSION\tAGENT\tVERSION\tMESSAGES\tSIZE\tUPDATED\tSTATE")
	for _, v := range heads {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", printable(v.Key.Namespace), printable(v.Key.Session),
			printable(v.Key.Agent), v.Version.Version, v.Counts.Messages, size(v.RawBytes), v.Created.Local().Format(time.DateTime), sessionState(v, time.Now()))
	}
	return tw.Flush()
}

// sessionState says in a word or two who may write the session.
func sessionState(s checkpoint.Session, now time.Time) string {
	switch {
	case s.Moved != nil:
		return "moved to " + printable(s.Moved.To)
	case s.Lease != nil && s.Lease.Held(now):
		return fmt.Sprintf("leased by %s (epoch %d)", printable(s.Lease.Owner), s.Lease.Epoch)
	}
	return "free"
}
