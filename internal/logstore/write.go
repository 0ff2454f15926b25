package logstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/checkpointd/checkpointd/internal/engine"
)

// lastSeq is what a publish requires of its subject's last sequence: Nats-Expected-Last-
// Subject-Sequence, the compare-and-swap of a log's Append and of a value's creation; or nothing
// (anyLastSeq), for an index subject, which every session of the namespace appends to.
type lastSeq struct {
	check bool
	seq   uint64 // with check: the subject's last sequence must be this (0: it has no message)
}

func lastSeqIs(seq uint64) lastSeq { return lastSeq{check: true, seq: seq} }

var anyLastSeq = lastSeq{}

// publish stores data on subject if its last sequence is as expected, and returns the new
// message's sequence; engine.ErrConflict if the subject's last sequence is another.
//
// A clustered stream's leader also refuses a write whose subject has another write in process
// (proposed, not yet applied: nats-server's expectedPerSubjectInProcess and inflight checks),
// with 10164 and no last sequence, whatever the expected sequence. The conformance suite met it
// with one writer appending in sequence, right after its previous append was acknowledged. So on
// 10164 the leader is asked for the subject's last sequence: if it is still the expected one, the
// write is tried again (the refusal came before anything was proposed); if it is another, the
// compare-and-swap is lost (ErrConflict). A 10164 is never reported as ErrConflict unless the
// leader said so: a caller takes a conflict for "someone else wrote it" (PutValue: the value
// exists), which an unanswered read does not show.
func (l *Log) publish(ctx context.Context, subject string, data []byte, expect lastSeq, hdr nats.Header) (uint64, error) {
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	for attempt := 1; ; attempt++ {
		seq, err := l.publishOnce(ctx, subject, data, expect, hdr)
		if !errors.Is(err, errInProcess) {
			return seq, err
		}
		last, gerr := l.get(ctx, getRequest{LastFor: subject}, leaderOnly)
		if errors.Is(gerr, engine.ErrNotFound) {
			last.seq, gerr = 0, nil
		}
		switch {
		case gerr != nil:
			return 0, fmt.Errorf("%w; reading the last sequence of %s from the leader: %w", err, subject, gerr)
		case last.seq != expect.seq:
			return 0, fmt.Errorf("%w: %w (the last is %d)", engine.ErrConflict, err, last.seq)
		case attempt == 100:
			return 0, fmt.Errorf("%w: %w (100 attempts)", ErrUnavailable, err)
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("%w: %w", err, ctx.Err())
		case <-time.After(time.Duration(min(attempt, 10)) * time.Millisecond):
		}
	}
}

// publishOnce is one publish of publish.
func (l *Log) publishOnce(ctx context.Context, subject string, data []byte, expect lastSeq, hdr nats.Header) (uint64, error) {
	m := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}
	for k, v := range hdr {
		m.Header[k] = v
	}
	if expect.check {
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(expect.seq, 10))
	}
	resp, err := l.nc.RequestMsgWithContext(ctx, m)
	err = unavailable(err)
	if errors.Is(err, nats.ErrMaxPayload) {
		return 0, fmt.Errorf("logstore: %s: %w: %v", subject, engine.ErrTooLarge, err)
	}
	if err != nil {
		return 0, fmt.Errorf("logstore: publishing to %s: %w", subject, err)
	}
	var ack struct {
		Seq uint64 `json:"seq"`
	}
	if err := apiReply(resp, &ack); err != nil {
		return 0, fmt.Errorf("logstore: publishing to %s: %w", subject, err)
	}
	if ack.Seq == 0 {
		return 0, fmt.Errorf("logstore: publishing to %s: ack without a sequence %.200q", subject, resp.Data)
	}
	return ack.Seq, nil
}

// ErrUnavailable: the store cannot answer now, and the same call may succeed later: the stream
// has no leader (an election: JetStream 10008), no server answers for it (no responders: a
// restart, or the stream is gone), or the server is not ready to check a compare-and-swap
// (10163). It is engine.ErrUnavailable, which the engine and the daemon tell apart with errors.Is
// (clients are told to retry).
// A request that no server answered in time is not marked: it may have been carried out (the
// error is then the context's deadline, or nats.ErrTimeout). Nor is a store's refusal (10077: a
// full stream or disk), which waiting alone does not lift.
var ErrUnavailable = engine.ErrUnavailable

// unavailable marks nats.go's no-responders error as ErrUnavailable (keeping both).
func unavailable(err error) error {
	if errors.Is(err, nats.ErrNoResponders) {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}

// errInProcess marks 10164 (see publish).
var errInProcess = errors.New("another write to the subject is in process")

// apiError is a JetStream API error reply.
type apiError struct {
	Code        int    `json:"code"`
	ErrCode     uint16 `json:"err_code"`
	Description string `json:"description"`
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%s (JetStream %d/%d)", e.Description, e.Code, e.ErrCode)
}

// JetStream error codes (nats-server's errors.json).
const (
	errCodeWrongLastSequence = 10071
	// errCodeWrongLastSequenceClustered: "wrong last sequence" without the last sequence
	// (JSStreamWrongLastSequenceConstantErr), what a clustered stream answers when the subject has
	// a write in process (publish).
	errCodeWrongLastSequenceClustered = 10164
	errCodeNoMessageFound             = 10037
	errCodeStreamNotFound             = 10059
	errCodeSequenceNotFound           = 10043
	errCodeMessageTooLarge            = 10054
	// errCodeClusterNotAvailable: "JetStream system temporarily unavailable" (no leader).
	errCodeClusterNotAvailable = 10008
	// errCodeExpectedLastNotReady: "expected last sequence per subject temporarily unavailable".
	errCodeExpectedLastNotReady = 10163
	// errCodeMessageDeleteFailed: a message delete the store failed, its error the description;
	// "no message found" (filestore: below the first sequence, or in a removed block) is a
	// message already gone.
	errCodeMessageDeleteFailed = 10057
	// errCodeDuplicateInProcess: "duplicate message id is in process", what a clustered stream
	// answers a publish whose message id another publish still being stored carries.
	errCodeDuplicateInProcess = 10158
)

// msgNotFound is nats-server's ErrStoreMsgNotFound, as a 10057 describes it.
const msgNotFound = "no message found"

// mapped wraps the engine's error that the code stands for, if any, and e itself (a refusal:
// refused).
func (e *apiError) mapped() error {
	switch e.ErrCode {
	case errCodeWrongLastSequence:
		return fmt.Errorf("%w: %w", engine.ErrConflict, e)
	case errCodeWrongLastSequenceClustered: // publish asks the leader whether it is a conflict
		return fmt.Errorf("%w: %w", errInProcess, e)
	case errCodeNoMessageFound, errCodeSequenceNotFound:
		return fmt.Errorf("%w: %w", engine.ErrNotFound, e)
	case errCodeMessageTooLarge:
		return fmt.Errorf("%w: %w", engine.ErrTooLarge, e)
	case errCodeClusterNotAvailable, errCodeExpectedLastNotReady:
		return fmt.Errorf("%w: %w", ErrUnavailable, e)
	case errCodeMessageDeleteFailed:
		if strings.Contains(e.Description, msgNotFound) {
			return fmt.Errorf("%w: %w", engine.ErrNotFound, e)
		}
	}
	return e
}

// refused reports whether err says the server did not store the message: it answered with an
// error (a JetStream API error: a lost compare-and-swap, a full stream, ...), nobody received it
// (no responders), or it was never sent (too large, or a creation abandoned). Otherwise (a timeout, a lost connection) the
// message may have been stored, or may still be.
func refused(err error) bool {
	var api *apiError
	return errors.As(err, &api) || errors.Is(err, nats.ErrNoResponders) || errors.Is(err, engine.ErrTooLarge) || errors.Is(err, errAbandoned)
}
