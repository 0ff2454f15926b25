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
	fs := newFlagSet(a, "list", "", "Lists the sessions of a namespace (or of all, with -A) and their head versions, sorted\n"+
		"(with --limit N: the next N in the order they were created, and the --cursor of the page after).")
	var out outputFlag
	out.register(fs)
	var ns namespaces
	ns.register(fs, "list")
	ns.paging = &paging{
		limit:  fs.Int("limit", 0, fmt.Sprintf("only N sessions (1..%d), in the order they were created; the cursor of the next page goes to stderr", checkpoint.MaxListLimit)),
		cursor: fs.String("cursor", "", "with --limit: go on from where the previous page ended (the cursor it printed)"),
	}
	c, heads, err := ns.heads(ctx, a, fs, "list", args)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := writeHeads(a, out, heads); err != nil {
		return err
	}
	if next := ns.paging.next; next != "" {
		fmt.Fprintf(a.Stderr, "more: the next page is the same command with --cursor %s\n", printable(next))
	}
	return nil
}

// writeHeads prints the sessions of a listing as a table or as JSON.
func writeHeads(a *App, out outputFlag, heads []checkpoint.Session) error {
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
// one (-A); and, for list, a page of it.
type namespaces struct {
	namespace *string
	all       *bool
	paging    *paging // nil: every session
}

// paging is list's --limit and --cursor: one page of a listing, and where the next one starts.
type paging struct {
	limit  *int
	cursor *string
	next   string // the cursor of the page after the one listed ("": it was the last)
}

// check refuses what the daemon would: a limit outside 0..checkpoint.MaxListLimit, a cursor without one.
func (p *paging) check() error {
	if *p.limit < 0 || *p.limit > checkpoint.MaxListLimit {
		return usageErr(fmt.Errorf("--limit %d: want 1..%d (or 0: every session)", *p.limit, checkpoint.MaxListLimit))
	}
	if *p.cursor != "" && *p.limit == 0 {
		return usageErr(fmt.Errorf("--cursor goes on from a page of --limit N: give --limit too"))
	}
	return nil
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
	if n.paging != nil {
		if err := n.paging.check(); err != nil {
			return nil, nil, err
		}
	}
	c, err := a.connect()
	if err != nil {
		return nil, nil, err
	}
	var heads []checkpoint.Session
	switch {
	case n.paging != nil && *n.paging.limit > 0:
		heads, err = n.page(ctx, c)
	case *n.all:
		heads, err = c.ListAll(ctx)
	default:
		heads, err = c.List(ctx, *n.namespace)
	}
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return c, heads, nil
}

// page lists one page of --limit sessions from --cursor, in the order they were created, and keeps
// the cursor of the next.
func (n *namespaces) page(ctx context.Context, c *checkpoint.Client) ([]checkpoint.Session, error) {
	var p checkpoint.SessionPage
	var err error
	if *n.all {
		p, err = c.ListAllPage(ctx, *n.paging.cursor, *n.paging.limit)
	} else {
		p, err = c.ListPage(ctx, *n.namespace, *n.paging.cursor, *n.paging.limit)
	}
	n.paging.next = p.Next
	return p.Sessions, err
}
