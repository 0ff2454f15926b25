package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/checkpoint/conv"
)

// statsReport is what stats prints with -o json: the version read and its trackers.
type statsReport struct {
	Key     checkpoint.Key `json:"key"`
	Version uint64         `json:"version"`
	Dialect string         `json:"dialect"`
	conv.Trackers
}

func runStats(ctx context.Context, a *App, args []string) error {
	fs := newFlagSet(a, "stats", "SESSION",
		"Rebuilds an agent's trackers from one version's messages (default: the head): turns, tool calls by\n"+
			"name and their errors, tokens and cost per turn and in all, compactions, the last response, and the\n"+
			"tokens of the request view (from the last compaction on: what the last response reported, plus an\n"+
			"estimate of the messages after it) with the room left in a context window. Nothing of it is stored:\n"+
			"it is read from the messages (docs/format.md §1.4).")
	var k keyFlags
	var out outputFlag
	var version versionFlag
	k.register(fs)
	out.register(fs)
	fs.Var(&version, "version", "version to read (default: the head)")
	window := fs.Int64("context-window", 0, "the model's context window in tokens: print the room left in it")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs("stats", pos, 1, "SESSION"); err != nil {
		return err
	}
	if *window < 0 {
		return usageErr(fmt.Errorf("--context-window %d: want 0 (none) or more", *window))
	}
	c, err := a.connect()
	if err != nil {
		return err
	}
	defer c.Close()
	restored, v, err := c.Restore(ctx, k.key(pos[0]), version.n)
	if err != nil {
		return err
	}
	history, err := conv.Decode(v.Dialect, restored)
	if err != nil {
		return inputError{err}
	}
	r := statsReport{Key: v.Key, Version: v.Version, Dialect: orNative(v.Dialect), Trackers: conv.Track(history, *window)}
	if out == "json" {
		return writeJSON(a.Stdout, r)
	}
	return writeStatsTable(a.Stdout, r)
}

func orNative(d string) string {
	if d == "" {
		return "native"
	}
	return d
}

func writeStatsTable(w io.Writer, r statsReport) error {
	t := r.Trackers
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "session:\t%s version %d (%s)\n", printable(r.Key.String()), r.Version, r.Dialect)
	fmt.Fprintf(tw, "messages:\t%d in %d turn(s)\n", t.Messages, len(t.TurnStarts))
	fmt.Fprintf(tw, "tokens:\t%s\n", tokens(t.Usage))
	fmt.Fprintf(tw, "cost:\t%s\n", money(t.Cost))
	fmt.Fprintf(tw, "compactions:\t%s\n", indices(t.Compactions))
	fmt.Fprintf(tw, "context:\t%d tokens from message %d (%d reported, %d estimated)%s\n", t.Context.Tokens, t.Context.Start,
		t.Context.Reported, t.Context.Estimated, room(t.Context))
	if r := t.LastResponse; r != nil {
		fmt.Fprintf(tw, "last response:\tmessage %d (model %s, stop reason %s): %s\n", r.Index, orDash(r.Model), orDash(r.StopReason), oneLine(r.Text))
	}
	for _, u := range t.Unread {
		fmt.Fprintf(tw, "unread:\t%s\n", u)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	names := make([]string, 0, len(t.Tools))
	for n := range t.Tools {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(names) > 0 {
		fmt.Fprintln(tw, "\nTOOL\tCALLS\tERRORS\tERROR RESULTS AT")
		for _, n := range names {
			s := t.Tools[n]
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", printable(n), s.Calls, s.Errors, indices(s.ErrorAt))
		}
	}
	if len(t.Turns) > 0 {
		fmt.Fprintln(tw, "\nTURN\tSTART\tINPUT\tOUTPUT\tCACHE READ\tCACHE WRITE\tTOTAL\tCOST\tCUMULATIVE TOTAL\tCUMULATIVE COST")
		for i, u := range t.Turns {
			fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%d\t%s\n", i+1, u.Start, u.Usage.Input, u.Usage.Output, u.Usage.CacheRead,
				u.Usage.CacheWrite, u.Usage.Total, money(u.Cost), u.Cumulative.Total, money(u.CumulativeCost))
		}
	}
	return tw.Flush()
}

// money is a cost for people: 6 decimals, no float noise (-o json has the sums as they are).
func money(c float64) string { return strconv.FormatFloat(c, 'f', 6, 64) }

func tokens(u conv.Tokens) string {
	return fmt.Sprintf("%d input, %d output, %d cache read, %d cache write, %d total", u.Input, u.Output, u.CacheRead, u.CacheWrite, u.Total)
}

func room(c conv.Context) string {
	if c.Left == nil {
		return ""
	}
	return fmt.Sprintf("; window %d: %d left", c.Window, *c.Left)
}

func indices(is []int) string {
	if len(is) == 0 {
		return "-"
	}
	s := make([]string, len(is))
	for i, n := range is {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ", ")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return printable(s)
}

// oneLine is the start of a response's text, on one line.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > 60 {
		s = string(r[:60]) + "…"
	}
	return strconv.Quote(s)
}
