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
// saved, until ctx ends; it then returns nil. Versions come in the order the daemon settles them
// within each of the two subjects below. With session set, only that session's versions (every
// agent) are passed on.
//
// It listens to the live results of saves (docs/protocol.md §4.3): `cp.saved.<ns>.>` for saves
// sent as requests and `cp.result.<ns>.>` for saves off the ingest stream, both imported by a
// tenant's login: accepted saves only. A duplicate (a save retried under the same
// save id) is not a new version, and a refusal is no version, so neither is passed on. Versions
// saved while the connection is down are not seen (results are live; List or History give the
// state after a reconnect). fn runs on one goroutine, one version at a time.
//
// Where clients may publish on cp.result.> or cp.saved.> themselves (no --tenants accounts), a result could be
// forged: with ConfirmWatchedVersions each version is checked with Get before it is passed on.
func (c *Client) Watch(ctx context.Context, namespace, session string, fn func(Version), opts ...WatchOption) error {
	var o watchOptions
	for _, opt := range opts {
		opt(&o)
	}
	namespace = cmp.Or(namespace, wire.DefaultNamespace)
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	// One token after the namespace: a save's own result subject. The results of saves that could
	// not be attributed (cp.result.<ns>.seq.<n>) are refusals, and not matched. Saves sent as
	// requests announce theirs on cp.saved (not stored), saves off the ingest stream on cp.result.
	ns := wire.EncodeID(namespace)
	subjects := []string{"cp.saved." + ns + ".*", "cp.result." + ns + ".*"}
	results := make(chan watchedMsg)
	for _, subject := range subjects {
		sub, err := c.nc.SubscribeSync(subject)
		if err != nil {
			return unavailable("subscribing to %s: %v", subject, err)
		}
		defer sub.Unsubscribe()
		// Buffer generously: a slow fn must not cost versions (the default drops past 64 MiB too,
		// but counts messages as well).
		if err := sub.SetPendingLimits(-1, 64<<20); err != nil {
			return unavailable("subscribing to %s: %v", subject, err)
		}
		go forwardResults(ctx, sub, results)
	}
	// Subscribed once the server has it: versions saved after Watch began are then all seen.
	fctx, cancel := c.withTimeout(ctx)
	err := c.nc.FlushWithContext(fctx)
	cancel()
	if err != nil && ctx.Err() == nil {
		return unavailable("subscribing to %s: %v", subjects, err)
	}
	if o.onStarted != nil && err == nil {
		o.onStarted()
	}
	for {
		var w watchedMsg
		select {
		case <-ctx.Done():
			return nil
		case w = <-results:
		}
		m, err := w.msg, w.err
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, nats.ErrSlowConsumer):
			o.problem(fmt.Errorf("watching %s: results were dropped, their versions are not shown: %w", w.subject, err))
			continue
		case err != nil:
			return unavailable("watching %s: %v", w.subject, err)
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

// watchedMsg is what one of Watch's subscriptions received: a result, or why it has none.
type watchedMsg struct {
	subject string
	msg     *nats.Msg
	err     error
}

// forwardResults passes what sub receives on to results until ctx ends or sub fails (a slow
// consumer is reported and the forwarding goes on).
func forwardResults(ctx context.Context, sub *nats.Subscription, results chan<- watchedMsg) {
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if ctx.Err() != nil {
			return
		}
		select {
		case results <- watchedMsg{sub.Subject, m, err}:
		case <-ctx.Done():
			return
		}
		if err != nil && !errors.Is(err, nats.ErrSlowConsumer) {
			return
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
