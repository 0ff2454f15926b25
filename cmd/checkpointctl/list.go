package main

import (
	"context"
	"flag"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/checkpointd/checkpointd/checkpoint"
)

func runList(ctx context.Context, a *App, args []string) error {
	fs := newFlagSet(a, "list", "", "Lists the sessions of a namespace (or of all, with -A) and their head versions.")
	var out outputFlag
	out.register(fs)
	var ns namespaces
	ns.register(fs, "list")
	c, heads, err := ns.heads(ctx, a, fs, "list", args)
	if err != nil {
		return err
	}
	defer c.Close()
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

// namespaces is the choice of namespace of list and du: one (-n NS, default "default") or every
// one (-A).
type namespaces struct {
	namespace *string
	all       *bool
}

func (n *namespaces) register(fs *flag.FlagSet, verb string) {
	n.namespace = fs.String("namespace", "default", "namespace to "+verb)
	fs.StringVar(n.namespace, "n", "default", "short for --namespace")
	n.all = fs.Bool("A", false, verb+" every namespace")
	fs.BoolVar(n.all, "all-namespaces", false, verb+" every namespace")
}

// heads parses args (the command takes no arguments), connects and lists the chosen sessions'
// heads. The caller closes the client.
func (n *namespaces) heads(ctx context.Context, a *App, fs *flag.FlagSet, cmd string, args []string) (*checkpoint.Client, []checkpoint.Session, error) {
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return nil, nil, err
	}
	if err := wantArgs(cmd, pos, 0, "no arguments"); err != nil {
		return nil, nil, err
	}
	c, err := a.connect()
	if err != nil {
		return nil, nil, err
	}
	var heads []checkpoint.Session
	if *n.all {
		heads, err = c.ListAll(ctx)
	} else {
		heads, err = c.List(ctx, *n.namespace)
	}
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return c, heads, nil
}
