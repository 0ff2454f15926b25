package checkpoint

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

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
// same conversation and records where it came from (Version.ForkOf). to must not exist yet
// (to.Namespace "" means from's).
//
// Within a namespace the daemon forks by reference (the fork op: nothing of the conversation is
// sent or copied). Into another namespace, or on a daemon before checkpointd 0.5, which has no fork
// op (no responders), Fork restores the version and saves it as to's first version with
// Cp-Fork-Of: the daemon stores a copy.
func (c *Client) Fork(ctx context.Context, from Key, version uint64, to Key) (Version, error) {
	from, err := checkKey(from)
	if err != nil {
		return Version{}, err
	}
	to.Namespace = cmp.Or(to.Namespace, from.Namespace)
	if to, err = checkKey(to); err != nil {
		return Version{}, err
	}
	if to.Namespace != from.Namespace {
		return c.forkBySave(ctx, from, version, to) // the fork op stays in its namespace
	}
	req := wire.ForkRequest{SessionRequest: sessionRequest(from), Version: version, SaveID: nuid.Next(), Writer: c.writer,
		To: wire.ForkTarget{Session: to.Session, Agent: to.Agent}}
	var v Version
	err = c.call(ctx, wire.APISubject(from.Namespace, wire.OpFork), req, &v)
	if errors.Is(err, nats.ErrNoResponders) {
		return c.forkBySave(ctx, from, version, to)
	}
	if err != nil {
		return Version{}, err
	}
	if v.Key != to || v.Version != 1 || v.ForkOf == nil || v.ForkOf.Key != from || (version != 0 && v.ForkOf.Version != version) {
		return Version{}, &Error{Code: wire.CodeInternal, Index: -1, Offset: -1, Message: fmt.Sprintf(
			"fork: the daemon answered with version %d of %s (fork of %v), not version 1 of %s forked from %s", v.Version, v.Key, v.ForkOf, to, from)}
	}
	return v, nil
}

// forkBySave is Fork on a daemon without the fork op: the conversation goes back as a save.
func (c *Client) forkBySave(ctx context.Context, from Key, version uint64, to Key) (Version, error) {
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
