package logstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/checkpointd/checkpointd/internal/engine"
)

// getRequest is JetStream's JSApiMsgGetRequest, for $JS.API.DIRECT.GET and $JS.API.STREAM.MSG.GET.
type getRequest struct {
	Seq      uint64 `json:"seq,omitempty"`
	LastFor  string `json:"last_by_subj,omitempty"`
	NextFor  string `json:"next_by_subj,omitempty"`
	Batch    int    `json:"batch,omitempty"`     // direct gets, nats-server ≥ 2.11
	MaxBytes int    `json:"max_bytes,omitempty"` // with Batch
	NoHdr    bool   `json:"no_hdr,omitempty"`    // with Batch: data alone, no headers (ReadData)
}

// msg is one stored message as a get returns it.
type msg struct {
	seq     uint64
	subject string
	header  nats.Header
	data    []byte
	// time is when the stream stored it (its leader's clock; zero if the reply did not say).
	time time.Time
}

// replica says which server answers a read.
type replica int

const (
	// anyReplica: a direct get ($JS.API.DIRECT.GET), answered by the nearest replica, which may
	// not have applied the last acknowledged writes yet.
	anyReplica replica = iota
	// leaderOnly: $JS.API.STREAM.MSG.GET, answered by the stream leader, which has every
	// acknowledged write.
	leaderOnly
)

// get returns one message, read from the given replica; engine.ErrNotFound if there is none.
func (l *Log) get(ctx context.Context, req getRequest, from replica) (msg, error) {
	if from == anyReplica {
		return l.directOne(ctx, req)
	}
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	ctx, quiet := l.silence(ctx)
	defer quiet()
	body, _ := json.Marshal(req)
	reply, err := l.nc.RequestWithContext(ctx, apiPrefix+"STREAM.MSG.GET."+l.cfg.Stream, body)
	if err != nil {
		return msg{}, fmt.Errorf("stream leader get %s: %w", body, unavailable(err))
	}
	var resp struct {
		Message *struct {
			Subject string    `json:"subject"`
			Seq     uint64    `json:"seq"`
			Header  []byte    `json:"hdrs"`
			Data    []byte    `json:"data"`
			Time    time.Time `json:"time"`
		} `json:"message"`
	}
	if err := apiReply(reply, &resp); err != nil {
		return msg{}, fmt.Errorf("stream leader get %s: %w", body, streamNotFoundUnavailable(err))
	}
	if resp.Message == nil {
		return msg{}, fmt.Errorf("stream leader get %s: a reply without a message", body)
	}
	m := msg{seq: resp.Message.Seq, subject: resp.Message.Subject, data: resp.Message.Data, time: resp.Message.Time}
	if len(resp.Message.Header) > 0 {
		if m.header, err = nats.DecodeHeadersMsg(resp.Message.Header); err != nil {
			return msg{}, fmt.Errorf("stream leader get %s: message %d's headers: %w", body, m.seq, err)
		}
	}
	return m, nil
}

// streamNotFoundUnavailable marks a leader get's "stream not found" (10059) as ErrUnavailable. A
// leader get is answered by whichever server answers first of those that may: the stream's leader,
// a replica that knows the group has no leader (10008), and the meta leader, "stream not found",
// whenever it holds no assignment of the stream (nats-server's jsMsgGetRequest; its monitorCluster
// holds the assignments a restarted node recovers aside until its recovery ends). In a cluster
// losing and restarting nodes under load, CP_LOG's leader gets were answered so while the stream
// was there before and after (TestCluster_Harness: "lease-1: resume: ... stream not found"). The
// stream this Log was opened on is then unavailable for now, as it is to a direct get nobody
// answers (directMsg), not gone for good.
func streamNotFoundUnavailable(err error) error {
	var api *apiError
	if errors.As(err, &api) && api.ErrCode == errCodeStreamNotFound {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}

// directOne sends an unbatched direct get ($JS.API.DIRECT.GET, answered by any replica) and returns
// its one message; engine.ErrNotFound if there is none. It is a request on the connection's shared
// reply subscription: a subscription of its own, as a batch needs, would cost its pending channel
// (nats.go's 64 Ki slots: 512 KiB allocated and cleared) on every read, which was half the CPU of
// the read of a session saved once (docs/format.md §8.15c).
func (l *Log) directOne(ctx context.Context, req getRequest) (msg, error) {
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	ctx, quiet := l.silence(ctx)
	defer quiet()
	body, _ := json.Marshal(req)
	reply, err := l.nc.RequestWithContext(ctx, apiPrefix+"DIRECT.GET."+l.cfg.Stream, body)
	if err != nil {
		return msg{}, fmt.Errorf("direct get %s: %w", body, unavailable(err))
	}
	out, status, err := directMsg(reply, body)
	switch {
	case err != nil:
		return msg{}, err
	case status == "404":
		return msg{}, engine.ErrNotFound
	case status != "":
		return msg{}, fmt.Errorf("direct get %s: status %s %s in the reply to a get of one message", body, status, reply.Header.Get("Description"))
	}
	return out, nil
}

// directBatch sends a direct get ($JS.API.DIRECT.GET, answered by any replica) and calls fn
// with each message of the reply, in order, until fn returns false.
func (l *Log) directBatch(ctx context.Context, req getRequest, fn func(msg) bool) (err error) {
	_, err = l.directBatchMore(ctx, req, fn)
	return err
}

// directBatchMore is directBatch, and also reports whether the server holds more messages after
// those it sent. A batched request (req.Batch > 0, nats-server ≥ 2.11) is answered with up to
// Batch messages, then an end-of-batch status (204) whose Nats-Num-Pending says how many more
// match; an unbatched one with one message, or 404 when there is none (more is then false: the
// caller asks again from the next sequence).
func (l *Log) directBatchMore(ctx context.Context, req getRequest, fn func(msg) bool) (more bool, err error) {
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	body, _ := json.Marshal(req)
	inbox := l.nc.NewRespInbox()
	sub, err := l.nc.SubscribeSync(inbox)
	if err != nil {
		return false, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := l.nc.PublishRequest(apiPrefix+"DIRECT.GET."+l.cfg.Stream, inbox, body); err != nil {
		return false, fmt.Errorf("direct get %s: %w", body, err)
	}
	for {
		wait, quiet := l.silence(ctx)
		m, err := sub.NextMsgWithContext(wait)
		quiet()
		if err != nil {
			return false, fmt.Errorf("direct get %s: %w", body, unavailable(err))
		}
		out, status, err := directMsg(m, body)
		switch {
		case err != nil:
			return false, err
		case status == "404": // nothing (more) to read
			return false, nil
		case status == "204": // the end of a batch
			return m.Header.Get("Nats-Num-Pending") != "0", nil
		}
		if !fn(out) || req.Batch == 0 {
			return false, nil
		}
	}
}

// directMsg reads one message of a direct get's reply (body: the request, for errors): a stored
// message, or the status that ends the reply ("404": nothing (more) to read; "204": the end of a
// batch), or an error.
func directMsg(m *nats.Msg, body []byte) (msg, string, error) {
	switch status := m.Header.Get("Status"); status {
	case "":
	case "404", "204":
		return msg{}, status, nil
	case "503":
		return msg{}, "", fmt.Errorf("direct get %s: %w: no responders (is the stream there?)", body, ErrUnavailable)
	default:
		return msg{}, "", fmt.Errorf("direct get %s: status %s %s", body, status, m.Header.Get("Description"))
	}
	out := msg{subject: m.Header.Get("Nats-Subject"), header: m.Header, data: m.Data}
	out.time, _ = time.Parse(time.RFC3339Nano, m.Header.Get("Nats-Time-Stamp")) // zero if not
	var err error
	if out.seq, err = strconv.ParseUint(m.Header.Get("Nats-Sequence"), 10, 64); err != nil || out.seq == 0 {
		return msg{}, "", fmt.Errorf("direct get %s: a message without a sequence (Nats-Sequence %q)", body, m.Header.Get("Nats-Sequence"))
	}
	return out, "", nil
}

// apiReply reads a JetStream API reply into v, mapping its error (if any) to the engine's.
func apiReply(m *nats.Msg, v any) error {
	if st := m.Header.Get("Status"); st == "503" {
		return fmt.Errorf("%w: no responders (is JetStream there?)", ErrUnavailable)
	}
	var resp struct {
		Error *apiError `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return fmt.Errorf("unreadable reply %.200q: %w", m.Data, err)
	}
	if resp.Error != nil {
		return resp.Error.mapped()
	}
	if v != nil {
		if err := json.Unmarshal(m.Data, v); err != nil {
			return fmt.Errorf("unreadable reply %.200q: %w", m.Data, err)
		}
	}
	return nil
}
