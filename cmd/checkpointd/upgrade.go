package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/checkpointd/checkpointd/internal/transfer"
	"github.com/checkpointd/checkpointd/internal/transfer/edge"
	"github.com/checkpointd/checkpointd/internal/upgrade"
)

// upgradeStore brings a store written by an earlier release (format 2: five KV buckets) onto the log
// engine before the daemon serves it: in place and crash-safely (internal/upgrade, docs/format.md
// §8.17), or, with --no-upgrade, not at all: the start is refused with the commands that move the
// data by hand. A store without format 2 costs one stream lookup per bucket.
func upgradeStore(ctx context.Context, nc *nats.Conn, cfg config, log *slog.Logger) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	need, err := upgrade.Needed(ctx, js)
	if err != nil {
		return fmt.Errorf("checking whether the store needs an upgrade: %w", err)
	}
	if !need {
		return nil
	}
	where := cfg.DataDir
	if cfg.NATSURL != "" {
		where = nc.ConnectedUrlRedacted()
	}
	if cfg.NoUpgrade {
		return upgrade.Refusal(where)
	}
	eng, lg, err := transfer.OpenEngine(ctx, nc, cfg.Daemon)
	if err != nil {
		return err
	}
	host, _ := os.Hostname()
	opts := upgrade.Options{Stream: edge.LogStream, Owner: host, Embedded: cfg.NATSURL == "",
		Keys: cfg.Daemon.NamespaceKeys, LogSeals: cfg.Daemon.NamespaceKeys != nil, Logger: log}
	log.Info("the store holds checkpoints of an earlier release (format 2): upgrading it in place before serving", "store", where)
	for {
		rep, err := upgrade.Run(ctx, js, eng, lg, opts)
		if errors.Is(err, upgrade.ErrInProgress) || upgrade.Transient(err) {
			log.Info("the upgrade could not go on for now; trying again (it goes on where it stopped)", "err", err)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(5 * time.Second):
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("upgrading the store of format 2 (nothing of it was deleted; docs/format.md §8.17): %w", err)
		}
		log.Info("store upgraded to the log engine", "sessions", rep.Sessions, "skipped", rep.Skipped, "redone", rep.Redone,
			"versions", rep.Versions, "leases", rep.Leases, "moved", rep.Moved, "conversation_bytes", rep.ConversationBytes,
			"stored_bytes", rep.StoredBytes, "buckets_deleted", len(rep.BucketsDeleted), "took", rep.Took.Round(time.Millisecond))
		return nil
	}
}
