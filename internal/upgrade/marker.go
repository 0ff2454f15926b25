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
	Format  int       `json:"format"` // markerFormat
	From    int       `json:"from"`   // the format upgraded from: 2
	State   string    `json:"state"`  // stateStarted or stateDone
	Run     string    `json:"run"`    // random, one per run
	Owner   string    `json:"owner,omitempty"`
	Started time.Time `json:"started"` // when this run began
	At      time.Time `json:"at"`      // when this message was written: the run's last sign of life
}

// readMarker returns the last marker and its sequence (zero and 0: none yet).
func (u *upgrader) readMarker(ctx context.Context) (marker, uint64, error) {
	msg, err := u.stream.GetLastMsgForSubject(ctx, MarkerSubject)
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

// claim makes the upgrade this run's: it writes "started" after the marker m at seq, unless
// another owner's run is under way and was seen alive less than StaleAfter ago.
func (u *upgrader) claim(ctx context.Context, m marker, seq uint64) error {
	if m.State == stateStarted && (m.Owner != u.opts.Owner || m.Owner == "") {
		if age := u.opts.Now().Sub(m.At); age < u.opts.StaleAfter {
			return fmt.Errorf("%w: run %s of %q, started %s, last seen %s ago; it is taken over once it has been silent for %s",
				ErrInProgress, m.Run, m.Owner, m.Started.Format(time.RFC3339), age.Round(time.Second), u.opts.StaleAfter)
		}
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	u.runID, u.markSeq = hex.EncodeToString(id[:]), seq
	if m.State == stateStarted {
		u.opts.Logger.Info("upgrade: going on with an upgrade that stopped", "run", m.Run, "owner", m.Owner, "lastSeen", m.At)
	} else {
		u.opts.Logger.Info("upgrade: format 2 found; copying it into the log engine before serving")
	}
	return u.writeMarker(ctx, stateStarted)
}

// writeMarker appends a marker of state after this run's last one (compare-and-swap): losing it
// means another daemon took the upgrade over.
func (u *upgrader) writeMarker(ctx context.Context, state string) error {
	now := u.opts.Now().UTC()
	data, err := json.Marshal(marker{Format: markerFormat, From: 2, State: state, Run: u.runID, Owner: u.opts.Owner, Started: u.started.UTC(), At: now})
	if err != nil {
		return err
	}
	ack, err := u.js.Publish(ctx, MarkerSubject, data, jetstream.WithExpectLastSequencePerSubject(u.markSeq),
		jetstream.WithExpectStream(u.opts.Stream))
	if errors.Is(err, jetstream.ErrKeyExists) || isWrongLast(err) {
		return fmt.Errorf("%w: the marker %s moved past message %d: another daemon took the upgrade over; this run stops", ErrInProgress, MarkerSubject, u.markSeq)
	}
	if err != nil {
		return fmt.Errorf("upgrade: writing the marker %s (%s): %w", MarkerSubject, state, err)
	}
	u.markSeq, u.lastBeat = ack.Sequence, now
	return u.wrote(ctx, "marker "+state)
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

func isWrongLast(err error) bool {
	var api *jetstream.APIError
	if !errors.As(err, &api) {
		return false
	}
	return api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}
