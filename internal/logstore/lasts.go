package logstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"

	"github.com/checkpointd/checkpointd/internal/engine"
)

const (
	// lastsSubjects is the most subjects one multi_last direct get names: nats-server's
	// getDirectMulti refuses a request whose subjects match more than 1,024 (status 413).
	lastsSubjects = 1024
	// lastsRequestBytes bounds the subjects' bytes in one multi_last request, well below the
	// default max_payload (1 MiB): 1,024 subjects of the longest ids (~1 KB each) would not fit.
	lastsRequestBytes = 256 << 10
)

// multiLastRequest is a direct get of the last message of each of the subjects (nats-server ≥
// 2.11): the messages come in sequence order, from sequence Seq on, at most Batch of them and
// about MaxBytes, then an end-of-batch status (204) whose Nats-Num-Pending counts the heads not
// sent and whose Nats-UpTo-Sequence is the stream's last sequence the answer was taken at.
type multiLastRequest struct {
	Subjects []string `json:"multi_last"`
	Seq      uint64   `json:"seq,omitempty"`
	Batch    int      `json:"batch"`
	MaxBytes int      `json:"max_bytes"`
}

// errReplicaBehind: the replica that answered a multi_last had not applied every write the
// stream's leader had when the call began (or did not say); the heads are read from the leader.
var errReplicaBehind = errors.New("the replica that answered is behind the stream's leader")

// Lasts reads the heads with one multi_last direct get per ≤ 1,024 distinct subjects (docs/format.md
// §8.6), on nats-server ≥ 2.11; on older servers, one Last per key.
//
// On a replicated stream (or with LeaderReads) a direct get may be answered by a replica that is
// behind. So the leader is asked first for the stream's last sequence (one STREAM.INFO), and an
// answer taken at an earlier sequence (its Nats-UpTo-Sequence), or one that does not say (no
// heads at all: status 404), is not used: those keys are read one Last each from the leader.
// Every Append acknowledged before the call is thus seen; a Purge may not be yet.
func (l *Log) Lasts(ctx context.Context, keys []engine.Key) ([]engine.Entry, error) {
	at := make(map[string][]int, len(keys)) // subject → the positions of its keys
	var subjects []string                   // each once, in the order of keys
	for i, k := range keys {
		s, err := LogSubject(k)
		if err != nil {
			return nil, err
		}
		if at[s] == nil {
			subjects = append(subjects, s)
		}
		at[s] = append(at[s], i)
	}
	out := make([]engine.Entry, len(keys))
	if !l.batchedGets {
		return out, l.lastsOneByOne(ctx, keys, out)
	}
	var leaderSeq uint64
	if l.upToDate == leaderOnly && len(subjects) > 0 {
		ctx2, cancel := l.withTimeout(ctx)
		info, err := l.stream.Info(ctx2)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("logstore: last entries: the stream's last sequence: %w", unavailable(err))
		}
		leaderSeq = info.State.LastSeq
	}
	for len(subjects) > 0 {
		n := lastsChunk(subjects)
		chunk := subjects[:n]
		subjects = subjects[n:]
		err := l.multiLast(ctx, chunk, leaderSeq, func(m msg) {
			for _, i := range at[m.subject] {
				out[i] = engine.Entry{Seq: m.seq, Data: m.data}
			}
		})
		if errors.Is(err, errReplicaBehind) {
			err = l.lastsFromLeader(ctx, chunk, at, keys, out)
		}
		if err != nil {
			return nil, fmt.Errorf("logstore: last entries of %d logs: %w", len(keys), err)
		}
	}
	return out, nil
}

// lastsChunk is how many of subjects one multi_last names: at most lastsSubjects, and subjects
// of at most lastsRequestBytes (at least one).
func lastsChunk(subjects []string) int {
	size := 0
	for i, s := range subjects {
		size += len(s) + 3 // its quotes and comma
		if i == lastsSubjects || i > 0 && size > lastsRequestBytes {
			return i
		}
	}
	return len(subjects)
}

// lastsOneByOne reads each key's head with Last (older servers).
func (l *Log) lastsOneByOne(ctx context.Context, keys []engine.Key, out []engine.Entry) error {
	for i, k := range keys {
		e, err := l.Last(ctx, k)
		if errors.Is(err, engine.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		out[i] = e
	}
	return nil
}

// lastsFromLeader reads the heads of chunk's keys one Last each (to the leader), replacing what a
// replica that was behind answered.
func (l *Log) lastsFromLeader(ctx context.Context, chunk []string, at map[string][]int, keys []engine.Key, out []engine.Entry) error {
	for _, s := range chunk {
		i := at[s][0]
		e, err := l.Last(ctx, keys[i])
		if err != nil && !errors.Is(err, engine.ErrNotFound) {
			return err
		}
		for _, j := range at[s] {
			out[j] = e // Seq 0 if not found
		}
	}
	return nil
}

// multiLast calls found with the head of each of subjects that has one, reading as many
// batches as the server needs (about rangeBytes each). A head sent in an earlier batch and
// sent again, moved on, in a later one (a write between the two) is passed again: the later is
// the newer. With leaderSeq > 0, every batch must have been taken at the leader's sequence or
// later, else errReplicaBehind.
func (l *Log) multiLast(ctx context.Context, subjects []string, leaderSeq uint64, found func(msg)) error {
	want := make(map[string]bool, len(subjects))
	for _, s := range subjects {
		want[s] = true
	}
	req := multiLastRequest{Subjects: subjects, Seq: 1, Batch: len(subjects), MaxBytes: rangeBytes}
	for {
		eob, err := l.multiLastBatch(ctx, req, func(m msg) error {
			if !want[m.subject] { // the server filters; never take another's message
				return fmt.Errorf("multi_last returned %s's message %d, not asked for", m.subject, m.seq)
			}
			found(m)
			return nil
		})
		if err != nil {
			return err
		}
		if leaderSeq > 0 && (eob.none || eob.upTo < leaderSeq) {
			return errReplicaBehind
		}
		if eob.none || eob.pending == 0 {
			return nil
		}
		if eob.last < req.Seq {
			return fmt.Errorf("multi_last from %d: %d heads pending, none sent", req.Seq, eob.pending)
		}
		req.Seq = eob.last + 1
	}
}

// endOfBatch is what a multi_last reply ends with.
type endOfBatch struct {
	none    bool   // status 404 "No Results": none of the subjects has a message
	pending uint64 // heads not sent (max_bytes reached)
	last    uint64 // the last sequence sent
	upTo    uint64 // the stream's last sequence the heads were taken at (0: not said)
}

// multiLastBatch sends one multi_last request and passes each message of the reply to fn, up to
// the end of the batch.
func (l *Log) multiLastBatch(ctx context.Context, req multiLastRequest, fn func(msg) error) (endOfBatch, error) {
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	body, _ := json.Marshal(req)
	what := fmt.Sprintf("multi_last of %d subjects from %d", len(req.Subjects), req.Seq)
	inbox := l.nc.NewRespInbox()
	sub, err := l.nc.SubscribeSync(inbox)
	if err != nil {
		return endOfBatch{}, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := l.nc.PublishRequest(apiPrefix+"DIRECT.GET."+l.cfg.Stream, inbox, body); err != nil {
		return endOfBatch{}, fmt.Errorf("%s: %w", what, err)
	}
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return endOfBatch{}, fmt.Errorf("%s: %w", what, unavailable(err))
		}
		switch status := m.Header.Get("Status"); status {
		case "":
		case "404":
			if d := m.Header.Get("Description"); d != "No Results" {
				return endOfBatch{}, fmt.Errorf("%s: status 404 %s", what, d)
			}
			return endOfBatch{none: true}, nil
		case "204":
			return parseEndOfBatch(what, m.Header)
		case "503":
			return endOfBatch{}, fmt.Errorf("%s: %w: no responders (is stream %s there?)", what, ErrUnavailable, l.cfg.Stream)
		default:
			return endOfBatch{}, fmt.Errorf("%s: status %s %s", what, status, m.Header.Get("Description"))
		}
		out := msg{subject: m.Header.Get("Nats-Subject"), header: m.Header, data: m.Data}
		if out.seq, err = strconv.ParseUint(m.Header.Get("Nats-Sequence"), 10, 64); err != nil || out.seq == 0 {
			return endOfBatch{}, fmt.Errorf("%s: a message without a sequence (Nats-Sequence %q)", what, m.Header.Get("Nats-Sequence"))
		}
		if err := fn(out); err != nil {
			return endOfBatch{}, fmt.Errorf("%s: %w", what, err)
		}
	}
}

func parseEndOfBatch(what string, h nats.Header) (endOfBatch, error) {
	get := func(name string, must bool) (uint64, error) {
		v := h.Get(name)
		if v == "" && !must {
			return 0, nil
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: end of batch with %s %q", what, name, v)
		}
		return n, nil
	}
	var eob endOfBatch
	var err error
	if eob.pending, err = get("Nats-Num-Pending", true); err != nil {
		return eob, err
	}
	if eob.last, err = get("Nats-Last-Sequence", true); err != nil {
		return eob, err
	}
	eob.upTo, err = get("Nats-UpTo-Sequence", false)
	return eob, err
}
