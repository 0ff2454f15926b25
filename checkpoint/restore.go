package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/checkpointd/checkpointd/internal/snapshot"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// RestoreOption selects what Restore returns.
type RestoreOption func(*wire.ReadRequest)

// WithView selects messages: "full" (the default: every message) or "request" (from the last
// compaction marker on, the marker included: what the model sees after a compaction).
func WithView(view string) RestoreOption { return func(r *wire.ReadRequest) { r.View = view } }

// WithMaxMessages keeps only the most recent n messages (n rounded down to even), never starting on
// a tool result whose call was cut off.
func WithMaxMessages(n int) RestoreOption { return func(r *wire.ReadRequest) { r.MaxMessages = n } }

// Restore returns the conversation of one version of key (the head when version is 0) as the JSON
// array that was saved, verified against the hash recorded at save time, and that version's record.
// Options select a view of it instead of every message.
func (c *Client) Restore(ctx context.Context, key Key, version uint64, opts ...RestoreOption) ([]byte, Version, error) {
	v, err := c.Get(ctx, key, version)
	if err != nil {
		return nil, Version{}, err
	}
	req := wire.ReadRequest{SessionRequest: sessionRequest(v.Key), Version: v.Version}
	for _, o := range opts {
		o(&req)
	}
	raw, hash, err := c.read(ctx, v, req)
	if err != nil {
		return nil, Version{}, err
	}
	full := (req.View == "" || req.View == snapshot.ViewFull) && req.MaxMessages == 0
	if full {
		err = snapshot.Verify(v, raw)
	} else if wire.Hash(raw) != hash {
		err = fmt.Errorf("view of version %d of %s: bytes do not match %s", v.Version, v.Key, hash)
	}
	if err != nil {
		return nil, Version{}, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return raw, v, nil
}

// read fetches the conversation (or view) of v piece by piece, and the hash the daemon gives for it.
func (c *Client) read(ctx context.Context, v Version, req wire.ReadRequest) ([]byte, string, error) {
	subject := wire.APISubject(v.Key.Namespace, wire.OpRead)
	var out []byte
	var hash string
	for {
		req.Offset = int64(len(out))
		msg, err := c.request(ctx, subject, req)
		if err != nil {
			return nil, "", err
		}
		total, err := strconv.ParseInt(msg.Header.Get(wire.HdrTotal), 10, 64)
		if err != nil || total < 0 {
			return nil, "", errors.New("checkpoint: read reply without a valid " + wire.HdrTotal + " header")
		}
		if out == nil {
			out = make([]byte, 0, total)
			hash = msg.Header.Get(wire.HdrHash)
		} else if h := msg.Header.Get(wire.HdrHash); h != hash {
			return nil, "", fmt.Errorf("%w: read of version %d: pieces of different content (%s, %s)", ErrCorrupt, v.Version, hash, h)
		}
		out = append(out, msg.Data...)
		if int64(len(out)) >= total {
			return out, hash, nil
		}
		if len(msg.Data) == 0 {
			return nil, "", fmt.Errorf("checkpoint: read of version %d stalled at %d of %d bytes", v.Version, len(out), total)
		}
	}
}

// RestoreMerged returns the merged view of every agent of a session: their head versions'
// messages interleaved by timestamp, each with an "agentId" member added (and, with prefix, its
// first text prefixed "[agentId] ", as multi-agent routers show it), and the version merged for
// each agent. It is a view: what is stored is not changed.
func (c *Client) RestoreMerged(ctx context.Context, namespace, session string, prefix bool, opts ...RestoreOption) ([]byte, map[string]uint64, error) {
	k, err := checkKey(Key{Namespace: namespace, Session: session})
	if err != nil {
		return nil, nil, err
	}
	agents, err := c.list(ctx, wire.APISubject(k.Namespace, wire.OpList), session)
	if err != nil {
		return nil, nil, err
	}
	if len(agents) == 0 {
		return nil, nil, &Error{Code: wire.CodeNotFound, Message: "session " + session + ": no agent has a version", Index: -1, Offset: -1}
	}
	req := wire.ReadRequest{SessionRequest: wire.SessionRequest{Session: session}, Merge: map[string]uint64{}, AgentPrefix: prefix}
	for _, v := range agents {
		req.Merge[v.Key.Agent] = v.Version.Version
	}
	for _, o := range opts {
		o(&req)
	}
	raw, hash, err := c.read(ctx, Version{Key: k}, req)
	if err != nil {
		return nil, nil, err
	}
	if wire.Hash(raw) != hash {
		return nil, nil, fmt.Errorf("%w: merged view of %s: bytes do not match %s", ErrCorrupt, session, hash)
	}
	return raw, req.Merge, nil
}
