package upgrade

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// MarkerSubject is where the upgrade keeps its progress, on the log's stream (CP_LOG). It cannot
// be a session's subject: those are cp.log.<ns>.<session>.<agent>, five tokens each made of
// wire.EncodeID's alphabet [A-Za-z0-9_=-], and this one has three tokens and a "$", which that
// alphabet never produces. Nothing that lists sessions reads it (listing goes through cp.idx.<ns>,
// and cp.log.<ns>.> needs four tokens at least).
//
// Each message is a JSON object (marker); the last one is the state. Every write expects the
// sequence of the one before (Nats-Expected-Last-Subject-Sequence; 0 for the first), so two
// daemons can never both think they own the upgrade, nor both finish it.
const MarkerSubject = "cp.log.$upgrade"

// The states a marker records.
const (
	stateStarted = "started" // copying; the daemon must not serve
	stateDone    = "done"    // every session copied and checked: the new format is complete
)

// markerFormat is the marker's own layout version; a reader refuses others (ErrMarker).
const markerFormat = 1

// marker is one message on MarkerSubject.
type marker struct {
	Format int    `json:"format"` // markerFormat
	From   int    `json:"from"`   // the format upgraded from: 2
	State  string `json:"state"`  // stateStarted or stateDone
	Run    string `json:"run"`    // random, one per run
	Owner  string `json:"owner,omitempty"`
	// Process is random, one per daemon process (processID): a run finds its own process's
	// unfinished run by it (a host name is not enough: two daemons on one host share it).
	Process string    `json:"process,omitempty"`
	Started time.Time `json:"started"` // when this run began (its host's clock: for people)
	At      time.Time `json:"at"`      // when this message was written (its host's clock: for people)
}

// processID names this process in the markers it writes (marker.Process).
var processID = newID()

func newID() string {
	var id [8]byte
	_, _ = rand.Read(id[:]) // never fails: crypto/rand crashes the program rather than return short
	return hex.EncodeToString(id[:])
}

// readMarker returns the last marker on stream and its sequence (zero and 0: none yet).
func readMarker(ctx context.Context, stream jetstream.Stream) (marker, uint64, error) {
	msg, err := stream.GetLastMsgForSubject(ctx, MarkerSubject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return marker{}, 0, nil
	}
	if err != nil {
		return marker{}, 0, fmt.Errorf("upgrade: reading the marker %s: %w", MarkerSubject, err)
	}
	var m marker
	if err := json.Unmarshal(msg.Data, &m); err != nil {
		return marker{}, 0, fmt.Errorf("%w: %s message %d: %v", ErrMarker, MarkerSubject, msg.Sequence, err)
	}
	if m.Format != markerFormat || m.From != 2 || m.State != stateStarted && m.State != stateDone {
		return marker{}, 0, fmt.Errorf("%w: %s message %d is format %d from %d, state %q (this code writes format %d from 2, started or done)",
			ErrMarker, MarkerSubject, msg.Sequence, m.Format, m.From, m.State, markerFormat)
	}
	return m, msg.Sequence, nil
}

// claim makes the upgrade this run's: it writes "started" after the marker m at seq. An
// unfinished run is taken over at once when it is this process's (an earlier call of Run that
// returned) or when no other daemon can be running on the store (Options.Embedded); another
// daemon's only once its marker has not moved for StaleAfter (waitStale).
func (u *upgrader) claim(ctx context.Context, m marker, seq uint64) error {
	if m.State == stateStarted && !u.opts.Embedded && m.Process != u.opts.process {
		if err := u.waitStale(ctx, m, seq); err != nil {
			return err
		}
	}
	u.runID, u.markSeq = newID(), seq
	if m.State == stateStarted {
		u.opts.Logger.Info("upgrade: going on with an upgrade that stopped", "run", m.Run, "owner", m.Owner, "lastSeen", m.At)
	} else {
		u.opts.Logger.Info("upgrade: format 2 found; copying it into the log engine before serving")
	}
	return u.writeMarker(ctx, stateStarted)
}

// waitStale waits until another daemon's run, whose last marker is m at seq, has been silent for
// StaleAfter, measured on this host's clock from when this run first read it (the marker's own
// times are the other host's clock, which may be off by any amount). It returns ErrInProgress as
// soon as the marker moves: that run is alive (or another daemon took it over).
func (u *upgrader) waitStale(ctx context.Context, m marker, seq uint64) error {
	u.opts.Logger.Info("upgrade: another daemon's upgrade is unfinished; taking it over if its marker stays still", "run", m.Run,
		"owner", m.Owner, "for", u.opts.StaleAfter)
	since := u.opts.Now()
	poll := min(max(u.opts.StaleAfter/10, time.Millisecond), time.Second)
	for u.opts.Now().Sub(since) < u.opts.StaleAfter {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(poll):
		}
		_, now, err := readMarker(ctx, u.stream)
		if err != nil {
			return err
		}
		if now != seq {
			return fmt.Errorf("%w: run %q of %q, started %s, wrote its marker again (message %d after %d): it is alive; it is taken over once its marker stays still for %s",
				ErrInProgress, m.Run, m.Owner, m.Started.Format(time.RFC3339), now, seq, u.opts.StaleAfter)
		}
	}
	return nil
}

// writeMarker appends a marker of state after this run's last one (compare-and-swap): losing it
// means another daemon took the upgrade over.
func (u *upgrader) writeMarker(ctx context.Context, state string) error {
	now := u.opts.Now().UTC()
	data, err := json.Marshal(marker{Format: markerFormat, From: 2, State: state, Run: u.runID, Owner: u.opts.Owner,
		Process: u.opts.process, Started: u.started.UTC(), At: now})
	if err != nil {
		return err
	}
	ack, err := u.publishMarker(ctx, data)
	if errors.Is(err, jetstream.ErrKeyExists) || isWrongLast(err) {
		return fmt.Errorf("%w: the marker %s moved past message %d: another daemon took the upgrade over; this run stops", ErrInProgress, MarkerSubject, u.markSeq)
	}
	if err != nil {
		return fmt.Errorf("upgrade: writing the marker %s (%s): %w", MarkerSubject, state, err)
	}
	u.markSeq, u.lastBeat = ack.Sequence, now
	return u.wrote(ctx, "marker "+state)
}

// publishMarker publishes data on MarkerSubject after this run's last marker. A clustered
// stream's leader refuses a write whose subject has another write in process (proposed, not yet
// applied) with 10164 and no last sequence, even to a writer that waited for its previous ack
// (logstore.Log.publish says more): then the last marker is read, and if it is still this run's the
// write is tried again (the refusal came before anything was proposed); otherwise the marker
// moved, and the refusal is returned as the lost compare-and-swap it is.
func (u *upgrader) publishMarker(ctx context.Context, data []byte) (*jetstream.PubAck, error) {
	for attempt := 1; ; attempt++ {
		ack, err := u.js.Publish(ctx, MarkerSubject, data, jetstream.WithExpectLastSequencePerSubject(u.markSeq),
			jetstream.WithExpectStream(u.opts.Stream))
		if !isInProcess(err) || attempt == 100 {
			return ack, err
		}
		_, last, rerr := readMarker(ctx, u.stream)
		if rerr != nil {
			return nil, errors.Join(err, rerr)
		}
		if last != u.markSeq {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, errors.Join(err, ctx.Err())
		case <-time.After(time.Duration(min(attempt, 10)) * time.Millisecond):
		}
	}
}

// heartbeat writes "started" again when the last sign of life is HeartbeatEvery old, so that
// another daemon waits rather than takes over, and this run learns if one did.
func (u *upgrader) heartbeat(ctx context.Context) error {
	if u.opts.Now().Sub(u.lastBeat) < u.opts.HeartbeatEvery {
		return nil
	}
	u.opts.Logger.Info("upgrade: copying format 2", "sessions", u.rep.Sessions, "skipped", u.rep.Skipped, "versions", u.rep.Versions,
		"conversationBytes", u.rep.ConversationBytes)
	return u.writeMarker(ctx, stateStarted)
}

// isWrongLast reports a lost compare-and-swap on the marker's subject.
func isWrongLast(err error) bool {
	return apiCode(err) == jetstream.JSErrCodeStreamWrongLastSequence || isInProcess(err)
}

// isInProcess reports 10164: "wrong last sequence" without the last sequence, what a clustered
// stream answers while the subject has a write in process (publishMarker).
func isInProcess(err error) bool {
	return apiCode(err) == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}

func apiCode(err error) jetstream.ErrorCode {
	var api *jetstream.APIError
	if !errors.As(err, &api) {
		return 0
	}
	return api.ErrorCode
}
