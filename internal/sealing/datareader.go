package sealing

import (
	"context"
	"fmt"

	"github.com/checkpointd/checkpointd/internal/engine"
)

var _ engine.DataReader = (*Log)(nil)

// ReadData opens the data the inner log's entries hold (engine.DataReader: a session's tail read
// without sequences), so that sealing costs a restore nothing but the opening. An entry that does
// not open stops the read with its SealError.
func (l *Log) ReadData(ctx context.Context, key engine.Key, after uint64, n int, fn func(data []byte) bool) error {
	place := entryPlace(key)
	var openErr error
	err := engine.ReadData(ctx, l.inner, key, after, n, func(stored []byte) bool {
		var data []byte
		data, openErr = l.open(key.Namespace, place, stored, func() string {
			return fmt.Sprintf("a log entry after %d of session %q agent %q", after, key.Session, key.Agent)
		})
		return openErr == nil && fn(data)
	})
	if openErr != nil {
		return openErr
	}
	return err
}
