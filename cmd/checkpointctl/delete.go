package main

import (
	"context"
	"fmt"
)

func runDelete(ctx context.Context, a *App, args []string) error {
	fs := newFlagSet(a, "delete", "SESSION",
		"Removes SESSION (one agent of it): every version and every stored message. With --expect-version,\n"+
			"only if the head is still that version (exit 4 if not).")
	var k keyFlags
	var out outputFlag
	var expect versionFlag
	k.register(fs)
	out.register(fs)
	fs.Var(&expect, "expect-version", "delete only if the session's head is this version")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs("delete", pos, 1, "SESSION"); err != nil {
		return err
	}
	c, err := a.connect()
	if err != nil {
		return err
	}
	defer c.Close()
	var want *uint64
	if expect.set {
		want = &expect.n
	}
	v, err := c.Delete(ctx, k.key(pos[0]), want)
	if err != nil {
		return err
	}
	if out == "json" {
		return writeJSON(a.Stdout, v)
	}
	_, err = fmt.Fprintf(a.Stdout, "deleted %s (head was version %d)\n", printable(v.Key.String()), v.Version)
	return err
}
