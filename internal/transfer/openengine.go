package transfer

import (
	"context"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/sealing"
	"github.com/checkpointd/checkpointd/internal/transfer/edge"
)

// OpenEngine opens the log engine as Open does (the stream CP_LOG, created if missing; its log
// sealed with cfg.NamespaceKeys), for work that must be done before the daemon serves: the upgrade
// of a store of format 2 (cmd/checkpointd). It returns the engine and the log it stores in.
func OpenEngine(ctx context.Context, nc *nats.Conn, cfg Config) (*engine.Engine, engine.Log, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, nil, err
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = autoReplicas(nc)
	}
	var log engine.Log
	err = retryStartup(ctx, cfg.Logger, func(ctx context.Context) (err error) {
		log, _, err = edge.OpenLog(ctx, nc, js, cfg.Replicas)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	sealed := edge.SealLog(edge.BoundedLog{Log: log}, cfg.NamespaceKeys)
	return engine.New(sealed, cfg.Engine), sealed, nil
}

// SetNamespaceKeys puts new namespace keys in force (SIGHUP) and returns the ids of the keys that
// were in force and are no longer: what they sealed no longer opens. Encryption cannot be turned
// on or off while running (an error; the running keys stay).
func (d *Daemon) SetNamespaceKeys(nk *sealing.Keys) (dropped []string, err error) {
	if dropped, err = d.sealed.SetKeys(nk); len(dropped) > 0 {
		// A head restore trusts the head the engine holds for saves without opening the last
		// entry (engine.ReadZstdIf, docs/format.md §8.6): forgotten, every head is read, and
		// refused where a dropped key sealed it.
		d.Engine.Forget()
	}
	return dropped, err
}
