package main

import (
	"context"
	"fmt"

	"github.com/checkpointd/checkpointd/checkpoint"
)

func runFork(ctx context.Context, a *App, args []string) error {
	fs := newFlagSet(a, "fork", "SESSION NEW-SESSION",
		"Starts NEW-SESSION from a version of SESSION (default: its head). The new session's first version\n"+
			"records where it came from; NEW-SESSION must not exist yet (exit 4 if it does). The daemon stores\n"+
			"a reference to the version, not a copy (a daemon before 0.5 stores a copy).")
	var k keyFlags
	var out outputFlag
	var version versionFlag
	k.register(fs)
	out.register(fs)
	fs.Var(&version, "version", "version to fork from (default: the head)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs("fork", pos, 2, "SESSION and NEW-SESSION"); err != nil {
		return err
	}
	c, err := a.connect()
	if err != nil {
		return err
	}
	defer c.Close()
	v, err := c.Fork(ctx, k.key(pos[0]), version.n, checkpoint.Key{Namespace: k.namespace, Session: pos[1], Agent: k.agent})
	if err != nil {
		return err
	}
	if out == "json" {
		return writeJSON(a.Stdout, v)
	}
	_, err = fmt.Fprintf(a.Stdout, "forked %s version %d into %s (%d messages)\n",
		printable(pos[0]), v.ForkOf.Version, printable(v.Key.String()), v.Counts.Messages)
	return err
}
