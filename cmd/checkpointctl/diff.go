package main

import (
	"context"
	"fmt"
	"strconv"
)

func runDiff(ctx context.Context, a *App, args []string) error {
	fs := newFlagSet(a, "diff", "SESSION FROM TO",
		"Compares two versions of SESSION message by message: what was added, removed or changed, by index.\n"+
			"Version 0 is the head.")
	var k keyFlags
	var out outputFlag
	k.register(fs)
	out.register(fs)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs("diff", pos, 3, "SESSION, FROM and TO"); err != nil {
		return err
	}
	var versions [2]uint64
	for i, s := range pos[1:] {
		if versions[i], err = strconv.ParseUint(s, 10, 64); err != nil {
			return usageErr(fmt.Errorf("%q is not a version number", s))
		}
	}
	c, err := a.connect()
	if err != nil {
		return err
	}
	defer c.Close()
	changes, err := c.Diff(ctx, k.key(pos[0]), versions[0], versions[1])
	if err != nil {
		return err
	}
	if out == "json" {
		return writeJSON(a.Stdout, orEmpty(changes))
	}
	if len(changes) == 0 {
		_, err = fmt.Fprintln(a.Stdout, "no differences")
		return err
	}
	for _, ch := range changes {
		switch ch.Op {
		case "added":
			fmt.Fprintf(a.Stdout, "+ [%d] %s\n", ch.Index, excerpt(ch.New))
		case "removed":
			fmt.Fprintf(a.Stdout, "- [%d] %s\n", ch.Index, excerpt(ch.Old))
		default:
			fmt.Fprintf(a.Stdout, "~ [%d] %s\n    → %s\n", ch.Index, excerpt(ch.Old), excerpt(ch.New))
		}
	}
	return nil
}

// excerpt shortens a message for a one-line summary.
func excerpt(msg []byte) string {
	const max = 120
	if len(msg) <= max {
		return string(msg)
	}
	cut := max
	for cut > 0 && msg[cut]&0xC0 == 0x80 { // do not split a UTF-8 sequence
		cut--
	}
	return string(msg[:cut]) + fmt.Sprintf("… (%d bytes)", len(msg))
}
