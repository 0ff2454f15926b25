package logstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/checkpointd/checkpointd/internal/engine"
)

var _ engine.DataReader = (*Log)(nil)

// ReadData implements engine.DataReader: batched direct gets with "no_hdr" (nats-server ≥ 2.11),
// which return each message's data alone. The server then builds no headers per message and the
// client parses none: about half the cost per entry of Range (docs/format.md §8.6). Each batch
// asks for the entries still wanted; a batch cut short by max_bytes goes on after the sequence
// its end-of-batch status names. The server filters by subject, so no other log's entry comes;
// the caller checks what it reads (a replica behind the leader may return fewer). On a server
// without batched direct gets it is Range, without the sequences.
func (l *Log) ReadData(ctx context.Context, key engine.Key, after uint64, n int, fn func(data []byte) bool) error {
	if n <= 0 {
		return nil
	}
	subject, err := LogSubject(key)
	if err != nil {
		return err
	}
	if !l.batchedGets {
		return l.scan(ctx, subject, after+1, 0, rangeBatch, func(m msg) bool {
			n--
			return fn(m.data) && n > 0
		})
	}
	for from := after + 1; n > 0; {
		last, more, stopped, err := l.dataBatch(ctx, subject, from, n, func(data []byte) bool {
			n--
			return fn(data) && n > 0
		})
		if err != nil {
			return fmt.Errorf("logstore: reading %s: %w", subject, err)
		}
		if stopped || !more || last == 0 {
			return nil
		}
		from = last + 1
	}
	return nil
}

// dataBatch sends one batched direct get of up to n messages of subject from sequence from on,
// without headers, and calls fn with each message's data until fn returns false. It returns the
// sequence of the last message the server sent (from its end-of-batch status), whether it holds
// more, and whether fn stopped.
func (l *Log) dataBatch(ctx context.Context, subject string, from uint64, n int, fn func([]byte) bool) (last uint64, more, stopped bool, err error) {
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	body, _ := json.Marshal(getRequest{Seq: from, NextFor: subject, Batch: min(n, rangeBatch), MaxBytes: rangeBytes, NoHdr: true})
	inbox := l.nc.NewRespInbox()
	sub, err := l.nc.SubscribeSync(inbox)
	if err != nil {
		return 0, false, false, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := l.nc.PublishRequest(apiPrefix+"DIRECT.GET."+l.cfg.Stream, inbox, body); err != nil {
		return 0, false, false, fmt.Errorf("direct get %s: %w", body, err)
	}
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return 0, false, false, fmt.Errorf("direct get %s: %w", body, err)
		}
		if len(m.Header) == 0 { // a message's data (no_hdr: statuses alone have headers)
			if !fn(m.Data) {
				return 0, false, true, nil
			}
			continue
		}
		switch status := m.Header.Get("Status"); status {
		case "404": // nothing (more) to read
			return 0, false, false, nil
		case "204": // the end of the batch
			last, _ = strconv.ParseUint(m.Header.Get("Nats-Last-Sequence"), 10, 64)
			return last, m.Header.Get("Nats-Num-Pending") != "0", false, nil
		case "503":
			return 0, false, false, fmt.Errorf("direct get %s: no responders (is stream %s there?)", body, l.cfg.Stream)
		default:
			return 0, false, false, fmt.Errorf("direct get %s: status %q %s", body, status, m.Header.Get("Description"))
		}
	}
}
