package main

import (
	"context"
	"fmt"

	"github.com/checkpointd/checkpointd/internal/buildinfo"
)

// runVersion prints this checkpointctl's build: what to quote in a bug report. It needs no daemon.
func runVersion(_ context.Context, a *App, args []string) error {
	fs := newFlagSet(a, "version", "[-o json]", "Print checkpointctl's version, VCS commit, Go version, and the protocol and\nstorage format versions it speaks.")
	var out outputFlag
	out.register(fs)
	rest, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs("version", rest, 0, "no arguments"); err != nil {
		return err
	}
	info := buildinfo.Get()
	if out == "json" {
		return writeJSON(a.Stdout, info)
	}
	_, err = fmt.Fprintln(a.Stdout, "checkpointctl", info)
	return err
}
