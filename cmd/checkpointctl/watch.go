package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/checkpointd/checkpointd/checkpoint"
)

func runWatch(ctx context.Context, a *App, args []string) error {
	fs := newFlagSet(a, "watch", "[SESSION]",
		"Follows new versions of the namespace's sessions (or of SESSION, every agent) as they are saved,\n"+
			"one line per version; with -o json, one JSON object (the version record) per line. Refused and\n"+
			"duplicate saves are no new versions and are not shown. Runs until interrupted (Ctrl-C, exit 0).\n"+
			"Versions saved while the connection is down are not shown; a notice on stderr says when. Each version\n"+
			"is confirmed with the daemon before it is shown: a forged result is reported on stderr instead.")
	var out outputFlag
	out.register(fs)
	namespace := fs.String("namespace", "default", "namespace to watch")
	fs.StringVar(namespace, "n", "default", "short for --namespace")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return usageErr(fmt.Errorf("watch takes at most one SESSION, got %d arguments", len(pos)))
	}
	session := ""
	if len(pos) == 1 {
		session = pos[0]
	}
	notice := func(format string, args ...any) { fmt.Fprintf(a.Stderr, "checkpointctl watch: "+format+"\n", args...) }
	c, err := a.connect(
		nats.MaxReconnects(-1), // a watch runs for hours: keep trying
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				notice("connection lost (%v); versions saved until it is back are not shown", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { notice("reconnected to %s", checkpoint.PublicURL(nc.ConnectedUrlRedacted())) }))
	if err != nil {
		return err
	}
	defer c.Close()
	// Stdout gone (a closed pipe) ends the watch with that error.
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	var printErr error
	show := watchPrinter(a, out)
	err = c.Watch(ctx, *namespace, session, func(v checkpoint.Version) {
		if printErr = show(v); printErr != nil {
			stop()
		}
	}, checkpoint.OnWatchProblem(func(err error) { notice("%v", err) }), checkpoint.ConfirmWatchedVersions())
	if err != nil {
		return err
	}
	return printErr
}

// watchPrinter returns how one version is written: a line for people, or a compact JSON object per
// line (JSON Lines) for scripts.
func watchPrinter(a *App, out outputFlag) func(checkpoint.Version) error {
	if out == "json" {
		enc := json.NewEncoder(a.Stdout)
		return func(v checkpoint.Version) error { return enc.Encode(v) }
	}
	return func(v checkpoint.Version) error {
		_, err := fmt.Fprintf(a.Stdout, "%s  %s  agent %s  version %d  %s  by %s  %d messages, %s raw, %s stored\n",
			v.Created.Local().Format(time.DateTime), printable(v.Key.Session), printable(v.Key.Agent), v.Version,
			v.Reason, printable(v.Writer), v.Counts.Messages, size(v.RawBytes), size(v.StoredBytes))
		return err
	}
}
