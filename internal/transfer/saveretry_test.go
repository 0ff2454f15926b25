package transfer_test

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// retrySession is one session saved by raw save requests (docs/protocol.md §4.0), as writers whose
// replies may be lost.
type retrySession struct {
	t    *testing.T
	env  *testenv.Env
	key  wire.Key
	conv []byte // the conversation as last saved
	head uint64
}

// save sends the next turn as a request from writer, with Cp-Base-Version (only the new message)
// when asAppend, else the whole array; it returns the headers and body sent, and the version made.
func (s *retrySession) save(id, writer string, asAppend bool) (map[string]string, []byte, uint64) {
	s.t.Helper()
	next := turn(s.conv, writer, int(s.head)+1)
	hdr := map[string]string{wire.HdrSaveID: id, wire.HdrWriter: writer}
	body := next
	if asAppend && s.head > 0 {
		hdr[wire.HdrBaseVersion] = strconv.FormatUint(s.head, 10)
		body = append([]byte("["), next[len(s.conv):]...) // turn added ","+message after the head's "]"-less bytes
	}
	res := requestSave(s.t, s.env.Conn(), wire.SaveSubject(s.key), hdr, body)
	require.Nil(s.t, res.Error, "save %s", id)
	require.False(s.t, res.Duplicate, "save %s is new", id)
	s.conv, s.head = next, res.Version.Version
	return hdr, body, res.Version.Version
}

// requireDuplicate sends a save again as it was first sent (its reply lost) and requires the
// duplicate of the version it made, with nothing added to the session.
func (s *retrySession) requireDuplicate(hdr map[string]string, body []byte, made uint64) {
	s.t.Helper()
	res := requestSave(s.t, s.env.Conn(), wire.SaveSubject(s.key), hdr, body)
	require.Nil(s.t, res.Error, "the retry of %s is answered", hdr[wire.HdrSaveID])
	require.True(s.t, res.OK)
	require.True(s.t, res.Duplicate, "the retry of %s is a duplicate, not version %d", hdr[wire.HdrSaveID], res.Version.Version)
	require.Equal(s.t, made, res.Version.Version, "the duplicate names the version the save made")
	require.Equal(s.t, hdr[wire.HdrSaveID], res.Version.SaveID)
	require.Equal(s.t, wire.Hash(body), res.Received, "what the daemon read of the retry")
	head, err := s.env.Daemon.Engine.Head(ctxT(s.t), engine.Key{Namespace: s.key.Namespace, Session: s.key.Session, Agent: s.key.Agent})
	require.NoError(s.t, err)
	require.Equal(s.t, s.head, head.Version, "no version was added by the retry")
}

// A save request retried with the same save id after its reply was lost is the duplicate of the
// version it made, never a second version: after 0, 1 and several later saves by the same writer
// and another one, after a pack, across a daemon restart, and for a save id first sent on the
// ingest stream. The request path finds the save id in the session's own records only (no look
// at CP_RESULTS, where its results are never stored), so these are the guarantee of
// docs/protocol.md §4.3's duplicate window; each case runs as a whole-array save and as an append.
func TestSaveRequest_RetryIsTheDuplicateOfItsVersion(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	session := func(t *testing.T, name string) *retrySession {
		return &retrySession{t: t, env: env, key: wire.Key{Session: name}.WithDefaults(), conv: []byte("[]")}
	}
	for _, asAppend := range []bool{false, true} {
		shape := map[bool]string{false: "whole", true: "append"}[asAppend]
		for _, later := range []int{0, 1, 5} {
			t.Run(fmt.Sprintf("%s/after %d later saves", shape, later), func(t *testing.T) {
				s := session(t, fmt.Sprintf("retry-%s-%d", shape, later))
				s.save("first", "w1", asAppend)
				hdr, body, made := s.save("lost", "w1", asAppend)
				for i := range later {
					s.save(fmt.Sprintf("later-%d", i), []string{"w1", "w2"}[i%2], asAppend)
				}
				s.requireDuplicate(hdr, body, made)
			})
		}
		t.Run(shape+"/after a pack", func(t *testing.T) {
			s := session(t, "retry-pack-"+shape)
			s.save("first", "w1", asAppend)
			hdr, body, made := s.save("lost", "w1", asAppend)
			s.save("later-0", "w2", asAppend)
			res, err := env.Daemon.Engine.Pack(ctx, engine.Key{Namespace: s.key.Namespace, Session: s.key.Session, Agent: s.key.Agent}, true)
			require.NoError(t, err)
			require.NotZero(t, res.Entries, "the session was packed")
			s.save("later-1", "w1", asAppend)
			s.requireDuplicate(hdr, body, made)
		})
		if asAppend {
			// Rule 3 of the window: a retry naming its base version is recognised past the last
			// pack, as long as the session is at most 256 versions past that base.
			t.Run(shape+"/after two packs", func(t *testing.T) {
				s := session(t, "retry-two-packs")
				key := engine.Key{Namespace: s.key.Namespace, Session: s.key.Session, Agent: s.key.Agent}
				s.save("first", "w1", asAppend)
				hdr, body, made := s.save("lost", "w1", asAppend)
				for i := range 2 {
					s.save(fmt.Sprintf("later-%d", i), "w2", asAppend)
					res, err := env.Daemon.Engine.Pack(ctx, key, true)
					require.NoError(t, err)
					require.NotZero(t, res.Entries, "the session was packed")
				}
				s.save("later-2", "w1", asAppend)
				s.requireDuplicate(hdr, body, made)
			})
		}
		t.Run(shape+"/first sent on the ingest stream", func(t *testing.T) {
			s := session(t, "retry-ingest-"+shape)
			s.save("first", "w1", asAppend)
			next := turn(s.conv, "w1", 2)
			js, err := jetstream.New(env.Conn())
			require.NoError(t, err)
			id := "lost-on-the-stream-" + shape // a result subject is per namespace and save id
			h := nats.Header{wire.HdrSaveID: {id}, wire.HdrWriter: {"w1"}, wire.HdrMsgID: {id + "/1"}}
			publishRaw(t, js, wire.IngestSubject(s.key), h, string(next))
			stored := awaitStoredResult(t, js, wire.ResultSubject(s.key.Namespace, id))
			require.Nil(t, stored.Error)
			s.conv, s.head = next, stored.Version.Version
			s.save("later-0", "w2", asAppend)
			s.requireDuplicate(map[string]string{wire.HdrSaveID: id, wire.HdrWriter: "w1"}, next, stored.Version.Version)
		})
	}
	// Last: a restart of the server and the daemon, with sessions of both shapes saved before it.
	type lost struct {
		s    *retrySession
		hdr  map[string]string
		body []byte
		made uint64
	}
	var before []lost
	for _, asAppend := range []bool{false, true} {
		s := session(t, fmt.Sprintf("retry-restart-%v", asAppend))
		s.save("first", "w1", asAppend)
		hdr, body, made := s.save("lost", "w1", asAppend)
		s.save("later-0", "w2", asAppend)
		before = append(before, lost{s, hdr, body, made})
	}
	env.Restart()
	for _, l := range before {
		t.Run("across a restart/"+l.s.key.Session, func(t *testing.T) {
			l.s.t = t
			l.s.requireDuplicate(l.hdr, l.body, l.made)
		})
	}
}
