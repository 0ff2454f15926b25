package checkpoint

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/checkpointd/checkpointd/internal/wire"
)

// WatchOption configures Watch.
type WatchOption func(*watchOptions)

type watchOptions struct {
	onProblem func(error)
	onStarted func()
	confirm   bool
}

// ConfirmWatchedVersions makes Watch confirm each version with Get before passing it on: the record
// the daemon holds must be the one the result carried, field for field. A result that fails (a
// version that does not exist, or another record: a result forged by a client allowed to publish on
// the namespace's result subjects, which --tenants accounts forbid) goes to OnWatchProblem instead.
// It costs a request per version.
func ConfirmWatchedVersions() WatchOption { return func(o *watchOptions) { o.confirm = true } }

// OnWatchStarted is called once the watch is subscribed: every version saved after it is seen.
func OnWatchStarted(f func()) WatchOption { return func(o *watchOptions) { o.onStarted = f } }

// OnWatchProblem is called with what Watch could not pass on and went on past: a message on the
// namespace's result subjects that is not a well-formed save result of that namespace (only a
// client allowed to publish there can send one), or results dropped because fn kept up too slowly
// (nats.ErrSlowConsumer). Without it they are skipped; nothing of them reaches fn.
func OnWatchProblem(f func(error)) WatchOption { return func(o *watchOptions) { o.onProblem = f } }

// Watch calls fn with every new version of namespace ("" for the default namespace) as it is
// saved, in the order the daemon settles them, until ctx ends; it then returns nil. With session
// set, only that session's versions (every agent) are passed on.
//
// It listens to the live results of saves (docs/protocol.md §4.3, the `cp.result.<ns>.>` stream a
// tenant's login already imports): accepted saves only. A duplicate (a save retried under the same
// save id) is not a new version, and a refusal is no version, so neither is passed on. Versions
// saved while the connection is down are not seen (results are live; List or History give the
// state after a reconnect). fn runs on one goroutine, one version at a time.
//
// Where clients may publish on cp.result.> themselves (no --tenants accounts), a result could be
// forged: with ConfirmWatchedVersions each version is checked with Get before it is passed on.
func (c *Client) Watch(ctx context.Context, namespace, session string, fn func(Version), opts ...WatchOption) error {
	var o watchOptions
	for _, opt := range opts {
		opt(&o)
	}
	namespace = cmp.Or(namespace, wire.DefaultNamespace)
	// One token after the namespace: a save's own result subject. The results of saves that could
	// not be attributed (cp.result.<ns>.seq.<n>) are refusals, and not matched.
	subject := "cp.result." + wire.EncodeID(namespace) + ".*"
	sub, err := c.nc.SubscribeSync(subject)
	if err != nil {
		return unavailable("subscribing to %s: %v", subject, err)
	}
	defer sub.Unsubscribe()
	// Buffer generously: a slow fn must not cost versions (the default drops past 64 MiB too, but
	// counts messages as well).
	if err := sub.SetPendingLimits(-1, 64<<20); err != nil {
		return unavailable("subscribing to %s: %v", subject, err)
	}
	// Subscribed once the server has it: versions saved after Watch began are then all seen.
	fctx, cancel := c.withTimeout(ctx)
	err = c.nc.FlushWithContext(fctx)
	cancel()
	if err != nil && ctx.Err() == nil {
		return unavailable("subscribing to %s: %v", subject, err)
	}
	if o.onStarted != nil && err == nil {
		o.onStarted()
	}
	for {
		m, err := sub.NextMsgWithContext(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, nats.ErrSlowConsumer):
			o.problem(fmt.Errorf("watching %s: results were dropped, their versions are not shown: %w", subject, err))
			continue
		case err != nil:
			return unavailable("watching %s: %v", subject, err)
		}
		v, ok, err := watchedVersion(m.Data, namespace, session)
		if err == nil && ok && o.confirm {
			err = c.confirmVersion(ctx, v)
		}
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			o.problem(fmt.Errorf("result on %s: %w", m.Subject, err))
		case ok:
			fn(v)
		}
	}
}

func (o *watchOptions) problem(err error) {
	if o.onProblem != nil {
		o.onProblem(err)
	}
}

// watchedVersion decodes one save result and says whether it is a new version to pass on: accepted,
// not a duplicate, of namespace and (if set) session. A result that does not decode, or whose
// version is not of the key it names, is an error.
func watchedVersion(data []byte, namespace, session string) (Version, bool, error) {
	var res wire.SaveResult
	if err := json.Unmarshal(data, &res); err != nil {
		return Version{}, false, err
	}
	if !res.OK || res.Error != nil {
		return Version{}, false, nil // a refusal: no version
	}
	if res.Version == nil {
		return Version{}, false, fmt.Errorf("accepted save %q of %s carries no version", res.SaveID, res.Key)
	}
	if res.Key.Namespace != namespace || res.Version.Key != res.Key {
		return Version{}, false, fmt.Errorf("save %q names key %s and a version of %s, in namespace %q",
			res.SaveID, res.Key, res.Version.Key, namespace)
	}
	if res.Duplicate || (session != "" && res.Key.Session != session) {
		return Version{}, false, nil
	}
	return *res.Version, true, nil
}

// confirmVersion checks that the daemon's record of v's version is v, field for field.
func (c *Client) confirmVersion(ctx context.Context, v Version) error {
	stored, err := c.Get(ctx, v.Key, v.Version)
	if err != nil {
		return fmt.Errorf("%s version %d could not be confirmed: %w", v.Key, v.Version, err)
	}
	want, err := json.Marshal(v)
	if err != nil {
		return err
	}
	got, err := json.Marshal(stored)
	if err != nil {
		return err
	}
	if !bytes.Equal(want, got) {
		return fmt.Errorf("%s version %d: the record stored is not the one its result carries (save %q): a forged result",
			v.Key, v.Version, v.SaveID)
	}
	return nil
}
