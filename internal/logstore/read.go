package logstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/checkpointd/checkpointd/internal/engine"
)

func (l *Log) Range(ctx context.Context, key engine.Key, from, upTo uint64, fn func(engine.Entry) bool) error {
	subject, err := LogSubject(key)
	if err != nil {
		return err
	}
	err = l.scan(ctx, subject, max(from, 1), upTo, rangeBatch, func(m msg) bool {
		return fn(engine.Entry{Seq: m.seq, Data: m.data})
	})
	if err != nil {
		return fmt.Errorf("logstore: reading %s: %w", subject, err)
	}
	return nil
}

// scan calls fn with subject's messages whose sequence is in [from, upTo] (upTo 0: no bound),
// in order, until fn returns false. It reads with direct gets, answered by any replica: batches
// of up to batch messages (nats-server ≥ 2.11), or one message per request on older servers.
//
// On a replicated stream the replica that answers may be behind the leader: it has every message
// up to some point and none after. So when that replica says there is no more, and reads must be
// up to date (Log.upToDate), the leader is asked for the next message (one STREAM.MSG.GET); if it
// has one, the scan goes on from it. A scan thus sees every message acknowledged before it began
// (read-your-writes), and a scan up to a known sequence reads that far, unless the message is
// gone (deleted or purged).
func (l *Log) scan(ctx context.Context, subject string, from, upTo uint64, batch int, fn func(msg) bool) error {
	for upTo == 0 || from <= upTo {
		last, more, stopped, err := l.scanBatch(ctx, subject, from, upTo, batch, fn)
		if err != nil || stopped {
			return err
		}
		if last > 0 {
			from = last + 1
		}
		if more && last > 0 { // (more without a message would not move on)
			continue
		}
		if l.upToDate == anyReplica || (upTo > 0 && from > upTo) {
			return nil
		}
		m, err := l.get(ctx, getRequest{Seq: from, NextFor: subject}, leaderOnly)
		if errors.Is(err, engine.ErrNotFound) || err == nil && upTo > 0 && m.seq > upTo {
			return nil
		}
		if err != nil {
			return err
		}
		if !fn(m) {
			return nil
		}
		from = m.seq + 1
	}
	return nil
}

// scanBatch reads one batch from from on: it returns the last sequence it passed to fn, whether
// the server has more after it, and whether fn stopped the scan.
func (l *Log) scanBatch(ctx context.Context, subject string, from, upTo uint64, batch int, fn func(msg) bool) (last uint64, more, stopped bool, err error) {
	n := batch
	if upTo > 0 && upTo-from < uint64(n) { // sequences are stream-wide: at most this many
		n = int(upTo-from) + 1
	}
	req := getRequest{Seq: from, NextFor: subject}
	if l.batchedGets {
		req.Batch, req.MaxBytes = n, rangeBytes
	}
	var ferr error
	more, err = l.directBatchMore(ctx, req, func(m msg) bool {
		if m.subject != subject { // the server filters by subject; never pass on another's
			ferr = fmt.Errorf("direct get from %d returned %s's message %d", from, m.subject, m.seq)
			return false
		}
		if upTo > 0 && m.seq > upTo {
			stopped = true
			return false
		}
		last = m.seq
		if !fn(m) {
			stopped = true
			return false
		}
		return true
	})
	if err == nil {
		err = ferr
	}
	if stopped || err != nil {
		return last, false, stopped, err
	}
	if !l.batchedGets && last > 0 {
		more = true // one at a time: ask again until the server says there is none
	}
	return last, more, false, nil
}
