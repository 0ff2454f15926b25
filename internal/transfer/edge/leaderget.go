package edge

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Reads on a replicated stream.
//
// A direct get (AllowDirect) may be answered by any replica, and a replica may lag behind the
// leader by a few messages. On a single server that cannot happen and direct gets are 15-20x
// faster, so they are used. With replicas, the reads whose answer must include every acknowledged
// write (a session's head, "is a save still queued?", a save's stored result, a large save's
// pieces) go to the stream leader through the JetStream API instead.

// Reader gets messages from streams, from the leader when Leader is set.
type Reader struct {
	nc     *nats.Conn
	Leader bool
}

// Last returns the Last message on subject in s, or jetstream.ErrMsgNotFound.
func (r Reader) Last(ctx context.Context, s jetstream.Stream, subject string) (*jetstream.RawStreamMsg, error) {
	if !r.Leader {
		return s.GetLastMsgForSubject(ctx, subject)
	}
	return r.apiGet(ctx, s, map[string]any{"last_by_subj": subject})
}

// Next returns the first message on subject in s at or after sequence seq.
func (r Reader) Next(ctx context.Context, s jetstream.Stream, seq uint64, subject string) (*jetstream.RawStreamMsg, error) {
	if !r.Leader {
		return s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
	}
	return r.apiGet(ctx, s, map[string]any{"seq": seq, "next_by_subj": subject})
}

// The JetStream errors a leader get tells apart (nats-server's errors.json).
const (
	// errCodeNoMessageFound: the stream has no such message. It is the only "404" that means so.
	errCodeNoMessageFound = 10037
	// errCodeStreamNotFound: "stream not found", also a 404. A leader get is answered by whichever
	// server answers first of those that may (jsMsgGetRequest): the stream's leader; a replica
	// that knows the group has no leader (503); and the meta leader, with "stream not found",
	// whenever it holds no assignment of the stream (nats-server's monitorCluster holds the
	// assignments a restarted node recovers aside until its recovery ends). Under load, in a cluster losing and restarting nodes, CP_LOG's leader
	// gets were answered so while the stream was there before and after (TestCluster_Harness:
	// "lease-1: resume: ... stream not found (JetStream 404/10059)"). For a stream the daemon
	// set up, that is storage unavailable for now, as a direct get nobody answers is; never "no
	// message", which made a large save's chunks missing (bad_request).
	errCodeStreamNotFound = 10059
)

// apiGet asks the stream leader for one message ($JS.API.STREAM.MSG.GET).
func (r Reader) apiGet(ctx context.Context, s jetstream.Stream, req map[string]any) (*jetstream.RawStreamMsg, error) {
	body, _ := json.Marshal(req)
	ctx, cancel := OpContext(ctx)
	defer cancel()
	reply, err := r.nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+s.CachedInfo().Config.Name, body)
	if err != nil {
		return nil, err
	}
	var resp struct {
		Message *struct {
			Subject  string    `json:"subject"`
			Sequence uint64    `json:"seq"`
			Header   []byte    `json:"hdrs"`
			Data     []byte    `json:"data"`
			Time     time.Time `json:"time"`
		} `json:"message"`
		Error *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(reply.Data, &resp); err != nil {
		return nil, fmt.Errorf("stream %s: message get reply: %w", s.CachedInfo().Config.Name, err)
	}
	if resp.Error != nil {
		switch {
		case resp.Error.ErrCode == errCodeNoMessageFound:
			return nil, jetstream.ErrMsgNotFound
		case resp.Error.Code == 503, resp.Error.ErrCode == errCodeStreamNotFound:
			// No leader yet (an election), or a stream the daemon set up answered as not found
			// (see errCodeStreamNotFound): the client may retry.
			return nil, fmt.Errorf("stream %s: message get: %s (%d): %w", s.CachedInfo().Config.Name, resp.Error.Description, resp.Error.ErrCode, ErrUnavailable)
		}
		return nil, fmt.Errorf("stream %s: message get: %s (%d)", s.CachedInfo().Config.Name, resp.Error.Description, resp.Error.ErrCode)
	}
	if resp.Message == nil {
		return nil, fmt.Errorf("stream %s: message get: empty reply", s.CachedInfo().Config.Name)
	}
	m := &jetstream.RawStreamMsg{Subject: resp.Message.Subject, Sequence: resp.Message.Sequence, Data: resp.Message.Data, Time: resp.Message.Time}
	if len(resp.Message.Header) > 0 {
		if m.Header, err = nats.DecodeHeadersMsg(resp.Message.Header); err != nil {
			return nil, fmt.Errorf("stream %s: message headers: %w", s.CachedInfo().Config.Name, err)
		}
	}
	return m, nil
}

// NewReader reads from the streams of nc, from their leaders when leader is set (replicated
// streams).
func NewReader(nc *nats.Conn, leader bool) Reader { return Reader{nc: nc, Leader: leader} }
