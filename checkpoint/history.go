package checkpoint

import (
	"cmp"
	"context"
	"time"

	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// Diff compares versions a and b of a session (0: the head) message by message: messages added,
// removed and changed, with their indexes.
func (c *Client) Diff(ctx context.Context, key Key, a, b uint64) ([]Change, error) {
	ca, _, err := c.Restore(ctx, key, a)
	if err != nil {
		return nil, err
	}
	cb, _, err := c.Restore(ctx, key, b)
	if err != nil {
		return nil, err
	}
	return diffMessages(messages(ca), messages(cb)), nil
}

// messages splits a restored (canonical, verified) conversation into its messages.
func messages(conv []byte) [][]byte { return codec.SplitCanonical(conv[1 : len(conv)-1]) }

// Fork starts session to from version of session from (0: its head): to's first version holds the
// same conversation and records where it came from (Version.ForkOf). to must not exist yet.
func (c *Client) Fork(ctx context.Context, from Key, version uint64, to Key) (Version, error) {
	conv, v, err := c.Restore(ctx, from, version)
	if err != nil {
		return Version{}, err
	}
	ref := wire.ForkRef{Key: v.Key, Version: v.Version}
	return c.save(ctx, to, conv, nil, []SaveOption{ExpectVersion(0), WithReason(wire.ReasonFork), WithDialect(v.Dialect),
		func(o *saveOptions) { o.forkOf = &ref }})
}

// PruneResult is what a prune removed (or would remove) from one session.
type PruneResult = wire.PruneResult

// PruneOptions select what Prune removes. The head is always kept; when both limits are set, a
// version goes only if both would remove it. With no limit set, the daemon's policy for the
// namespace applies.
type PruneOptions struct {
	Session  string        // one session ("" for every session of the namespace)
	Agent    string        // with Session: the agent (default "main")
	KeepLast int           // keep at least the newest N versions
	MaxAge   time.Duration // keep versions younger than this
	DryRun   bool          // report what would go; remove nothing
}

// Prune removes old versions of one session, or of every session of namespace ("" for the default
// namespace), and reports what went, per session. Restores of kept versions are unaffected.
func (c *Client) Prune(ctx context.Context, namespace string, o PruneOptions) ([]PruneResult, error) {
	var rep wire.PruneReply
	req := wire.PruneRequest{Session: o.Session, Agent: o.Agent, KeepLast: o.KeepLast,
		MaxAgeSeconds: int64(o.MaxAge / time.Second), DryRun: o.DryRun}
	if o.MaxAge > 0 && req.MaxAgeSeconds == 0 {
		req.MaxAgeSeconds = 1
	}
	err := c.call(ctx, wire.APISubject(cmp.Or(namespace, wire.DefaultNamespace), wire.OpPrune), req, &rep)
	return rep.Sessions, err
}
