package sealing

import (
	"context"
	"errors"
	"fmt"

	"github.com/checkpointd/checkpointd/internal/engine"
)

var _ engine.Creator = (*Log)(nil)

// Create passes a first save's creation (engine.Creator) to the inner log, so that sealing costs
// it nothing but the sealing: the first entry is sealed as Append seals it.
func (l *Log) Create(ctx context.Context, key engine.Key) engine.Creation {
	return creation{l: l, key: key, inner: engine.Create(ctx, l.inner, key)}
}

type creation struct {
	l     *Log
	key   engine.Key
	inner engine.Creation
}

func (c creation) Append(ctx context.Context, data []byte) (uint64, error) {
	stored, err := c.l.seal(c.key.Namespace, entryPlace(c.key), data, func() string {
		return fmt.Sprintf("first log entry of session %q agent %q", c.key.Session, c.key.Agent)
	})
	if err != nil {
		return 0, errors.Join(err, c.inner.Abandon(ctx)) // nothing to append: the creation ends here
	}
	return c.inner.Append(ctx, stored)
}

func (c creation) Abandon(ctx context.Context) error { return c.inner.Abandon(ctx) }
