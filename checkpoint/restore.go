package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/checkpointd/checkpointd/internal/snapshot"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// Restore returns the conversation of one version of key (the head when version is 0) as the JSON
// array that was saved, verified against the hash recorded at save time, and that version's record.
func (c *Client) Restore(ctx context.Context, key Key, version uint64) ([]byte, Version, error) {
	v, err := c.Get(ctx, key, version)
	if err != nil {
		return nil, Version{}, err
	}
	raw, err := c.read(ctx, v)
	if err != nil {
		return nil, Version{}, err
	}
	if err := snapshot.Verify(v, raw); err != nil {
		return nil, Version{}, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return raw, v, nil
}

// read fetches the conversation of v piece by piece.
func (c *Client) read(ctx context.Context, v Version) ([]byte, error) {
	req := wire.ReadRequest{SessionRequest: sessionRequest(v.Key), Version: v.Version}
	subject := wire.APISubject(v.Key.Namespace, wire.OpRead)
	var out []byte
	for {
		req.Offset = int64(len(out))
		msg, err := c.request(ctx, subject, req)
		if err != nil {
			return nil, err
		}
		total, err := strconv.ParseInt(msg.Header.Get(wire.HdrTotal), 10, 64)
		if err != nil || total < 0 {
			return nil, errors.New("checkpoint: read reply without a valid " + wire.HdrTotal + " header")
		}
		if out == nil {
			out = make([]byte, 0, total)
		}
		out = append(out, msg.Data...)
		if int64(len(out)) >= total {
			return out, nil
		}
		if len(msg.Data) == 0 {
			return nil, fmt.Errorf("checkpoint: read of version %d stalled at %d of %d bytes", v.Version, len(out), total)
		}
	}
}
