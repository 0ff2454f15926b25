package logstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/wire"
)

func (l *Log) PutValue(ctx context.Context, ns, id string, blob []byte) error {
	subject, err := valueSubject(ns, id)
	if err != nil {
		return err
	}
	if len(blob) > l.maxEntry {
		return fmt.Errorf("logstore: value %s: %d bytes: %w (max %d)", subject, len(blob), engine.ErrTooLarge, l.maxEntry)
	}
	for attempt := 1; ; attempt++ {
		_, err = l.publish(ctx, subject, blob, lastSeqIs(0), nil)
		if !errors.Is(err, engine.ErrConflict) {
			return err
		}
		// The subject has a message: another writer's copy of the same value (values are named
		// by their content; the first one stays). Reporting it stored commits a reference to it,
		// so the leader is asked that it is still there (a DeleteValue may have come between).
		_, gerr := l.get(ctx, getRequest{LastFor: subject}, leaderOnly)
		switch {
		case gerr == nil:
			return nil
		case !errors.Is(gerr, engine.ErrNotFound) || attempt == 3:
			return fmt.Errorf("logstore: value %s: refused as existing (%v), but reading it from the leader: %w", subject, err, gerr)
		}
	}
}

func (l *Log) Value(ctx context.Context, ns, id string) ([]byte, error) {
	subject, err := valueSubject(ns, id)
	if err != nil {
		return nil, err
	}
	m, err := l.get(ctx, getRequest{LastFor: subject}, l.upToDate)
	if err != nil {
		return nil, fmt.Errorf("logstore: value %s: %w", subject, err)
	}
	return m.data, nil
}

// Values lists the namespace's value subjects (STREAM.INFO: O(values of the namespace)).
func (l *Log) Values(ctx context.Context, ns string, fn func(id string) bool) error {
	if err := wire.ValidateID(ns); err != nil {
		return fmt.Errorf("logstore: values of %q: %w", ns, err)
	}
	prefix := "cp.val." + wire.EncodeID(ns) + "."
	subjects, err := l.subjects(ctx, prefix+"*")
	if err != nil {
		return fmt.Errorf("logstore: values of %q: %w", ns, err)
	}
	ids := make([]string, 0, len(subjects))
	for _, s := range subjects {
		id, err := wire.DecodeID(strings.TrimPrefix(s, prefix))
		if err != nil {
			return fmt.Errorf("logstore: values of %q: subject %q: %w", ns, s, err)
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		if !fn(id) {
			return nil
		}
	}
	return nil
}

func (l *Log) DeleteValue(ctx context.Context, ns, id string) error {
	subject, err := valueSubject(ns, id)
	if err != nil {
		return err
	}
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	if err := l.stream.Purge(ctx, jetstream.WithPurgeSubject(subject)); err != nil {
		return fmt.Errorf("logstore: deleting value %s: %w", subject, err)
	}
	return nil
}
