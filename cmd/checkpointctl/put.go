package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/checkpointd/checkpointd/checkpoint"
)

func runPut(ctx context.Context, a *App, args []string) error {
	fs := newFlagSet(a, "put", "SESSION FILE",
		"Saves FILE, a JSON array of messages (- for stdin), as the next version of SESSION and prints the\n"+
			"version it became. With --expect-version the save is refused (exit 4) unless the head is that version.\n"+
			"With --append-to N, FILE holds only the messages appended after version N, which must be the head.")
	var k keyFlags
	var out outputFlag
	var expect versionFlag
	k.register(fs)
	out.register(fs)
	fs.Var(&expect, "expect-version", "save only if the session's head is this version (0: the session must not exist)")
	saveID := fs.String("save-id", "", "idempotency key: saving again with the same id returns the first version (default: a fresh id)")
	reason := fs.String("reason", "manual", "why this version was written: turn, pause, migrate, import or manual")
	var appendTo versionFlag
	fs.Var(&appendTo, "append-to", "FILE holds only the messages appended after this version (the head; else exit 4)")
	epoch := fs.Uint64("epoch", 0, "lease epoch to save under (from 'lease acquire'); needed while the session is leased")
	dialect := fs.String("dialect", "native", "the conversation's shape: "+strings.Join(checkpoint.Dialects(), ", ")+" (docs/format.md, \"Dialects\")")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs("put", pos, 2, "SESSION and FILE (- to read stdin)"); err != nil {
		return err
	}
	conv, err := readInput(a, pos[1])
	if err != nil {
		return err
	}
	opts := []checkpoint.SaveOption{checkpoint.WithReason(*reason), checkpoint.WithDialect(*dialect)}
	if *saveID != "" {
		opts = append(opts, checkpoint.WithSaveID(*saveID))
	}
	if expect.set {
		if appendTo.set {
			return usageErr(errors.New("--append-to already names the version to save onto; drop --expect-version"))
		}
		opts = append(opts, checkpoint.ExpectVersion(expect.n))
	}
	if *epoch != 0 {
		opts = append(opts, checkpoint.WithEpoch(*epoch))
	}
	c, err := a.connect()
	if err != nil {
		return err
	}
	defer c.Close()
	var v checkpoint.Version
	if appendTo.set {
		v, err = c.Append(ctx, k.key(pos[0]), appendTo.n, conv, opts...)
	} else {
		v, err = c.Save(ctx, k.key(pos[0]), conv, opts...)
	}
	var ce *checkpoint.Error
	if errors.As(err, &ce) && errors.Is(err, checkpoint.ErrConflict) {
		flag := "--expect-version"
		if appendTo.set {
			flag = "--append-to"
		}
		return fmt.Errorf("%w (restore it first, or pass %s %d)", err, flag, ce.Head)
	}
	if errors.As(err, &ce) && errors.Is(err, checkpoint.ErrInvalid) && ce.Field == "role" && !flagSet(fs, "dialect") {
		// A role the native format does not have is most often another runtime's history.
		others := slices.DeleteFunc(checkpoint.Dialects(), func(d string) bool { return d == "native" })
		return fmt.Errorf("%w (if this is another runtime's history, name its shape with --dialect: %s)",
			err, strings.Join(others, ", "))
	}
	if err != nil {
		return err
	}
	if out == "json" {
		return writeJSON(a.Stdout, v)
	}
	_, err = fmt.Fprintf(a.Stdout, "saved %s version %d (%d messages, %s, %s)\n",
		printable(v.Key.String()), v.Version, v.Counts.Messages, size(v.RawBytes), v.Hash)
	return err
}

// readInput reads a conversation from a file or, for "-", stdin; an empty one is refused here,
// before anything is sent.
func readInput(a *App, name string) ([]byte, error) {
	var data []byte
	var err error
	if name == "-" {
		data, err = io.ReadAll(a.Stdin)
	} else {
		data, err = os.ReadFile(name)
	}
	if errors.Is(err, os.ErrNotExist) {
		return nil, usageErr(err) // a mistyped path: the command line is wrong, not the input
	}
	if err != nil {
		return nil, inputError{err}
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, inputError{fmt.Errorf("%s is empty: want a JSON array of messages", name)}
	}
	return data, nil
}
