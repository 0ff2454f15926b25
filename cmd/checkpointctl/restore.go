package main

import (
	"context"
	"fmt"
	"os"

	"github.com/checkpointd/checkpointd/checkpoint"
)

func runRestore(ctx context.Context, a *App, args []string) error {
	fs := newFlagSet(a, "restore", "SESSION",
		"Writes one version of SESSION (default: the head) to stdout as the JSON array that was saved,\n"+
			"verified against the hash recorded at save time.\n\n"+
			"--as DIALECT writes it instead as a provider view in another dialect (docs/format.md §1.2), so that\n"+
			"a conversation recorded against one provider continues against another: everything is carried,\n"+
			"or the conversion is refused (exit 5) naming the message and what it cannot carry. The options\n"+
			"after --as shape the view for sending (on the view only: nothing stored changes); what --omit\n"+
			"leaves out is counted on stderr. Example:\n"+
			"  checkpointctl restore demo --view request --as anthropic --compaction-as-user --omit extensions,members --cache-control 2")
	var k keyFlags
	var version versionFlag
	k.register(fs)
	fs.Var(&version, "version", "version to restore (default: the head)")
	outFile := fs.String("out", "", "write to this file instead of stdout")
	view := fs.String("view", "full", "full (every message) or request (from the last compaction marker on)")
	maxMessages := fs.Int("max-messages", 0, "keep only the most recent N messages (N rounded down to even, never starting on a tool result)")
	merged := fs.Bool("merged", false, "all agents of the session, interleaved by timestamp, each message with its \"agentId\"")
	prefix := fs.Bool("agent-prefix", false, "with --merged: prefix each message's first text with \"[agentId] \"")
	var as asFlags
	as.register(fs)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs("restore", pos, 1, "SESSION"); err != nil {
		return err
	}
	if err := checkRestoreFlags(*view, *maxMessages); err != nil {
		return err
	}
	if err := as.check(*merged); err != nil {
		return err
	}
	c, err := a.connect()
	if err != nil {
		return err
	}
	defer c.Close()
	var conv []byte
	if *merged {
		if version.set || *view != "full" {
			return usageErr(fmt.Errorf("--merged merges the head of every agent: it takes neither --version nor --view"))
		}
		conv, _, err = c.RestoreMerged(ctx, k.namespace, pos[0], *prefix, checkpoint.WithMaxMessages(*maxMessages))
	} else {
		var v checkpoint.Version
		conv, v, err = c.Restore(ctx, k.key(pos[0]), version.n, checkpoint.WithView(*view), checkpoint.WithMaxMessages(*maxMessages))
		if err == nil && as.dialect != "" {
			conv, err = as.convert(a, conv, v.Dialect)
		}
	}
	if err != nil {
		return err
	}
	if *outFile != "" {
		return os.WriteFile(*outFile, conv, 0o600)
	}
	if _, err := a.Stdout.Write(conv); err != nil {
		return err
	}
	if a.StdoutIsTerminal {
		_, err = a.Stdout.Write([]byte("\n"))
	}
	return err
}

// checkRestoreFlags refuses, as usage mistakes (exit 2) before connecting, what the daemon would
// refuse or silently turn into an empty answer.
func checkRestoreFlags(view string, maxMessages int) error {
	if view != "full" && view != "request" { // the views of checkpoint.WithView
		return usageErr(fmt.Errorf("--view %q: want full or request", view))
	}
	// Fewer than 2 rounds down to 0 messages (the window keeps whole user/assistant pairs).
	if maxMessages != 0 && maxMessages < 2 {
		return usageErr(fmt.Errorf("--max-messages %d: the minimum is 2 (0: every message)", maxMessages))
	}
	return nil
}
