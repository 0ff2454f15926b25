package transfer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// Every number a save's headers carry is a plain decimal, sent once (docs/protocol.md §4.1), as
// Cp-Chunks already was: "01" was read as 1 for Cp-Expected-Version, Cp-Base-Version, Cp-Epoch,
// Cp-Import-Version and the version of Cp-Fork-Of, Cp-Format took "+1" and "01", and an empty
// Cp-Chunks (or any empty number) was taken for a header not sent. Each is now a bad_request
// naming the header, on the ingest stream and as a save request alike, and nothing is stored.
// Raw NATS messages, as a hostile or sloppy client sends them.
func TestSaveHeaders_NumbersArePlainDecimalsSentOnce(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	nc := env.Conn()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	key := checkpoint.Key{Session: "decimals"}
	wk := key.WithDefaults()
	conv := turn(nil, "owner", 1)
	_, err = env.Client.Save(ctx, key, conv)
	require.NoError(t, err)
	next := turn(conv, "sloppy", 2)
	appended := append([]byte("["), next[len(conv):]...) // the messages after version 1's, as an append sends them

	cases := []struct {
		name   string
		header string
		values []string
		body   []byte
	}{
		{"expected leading zero", wire.HdrExpectedVersion, []string{"01"}, next},
		{"expected sign", wire.HdrExpectedVersion, []string{"+1"}, next},
		{"expected empty", wire.HdrExpectedVersion, []string{""}, next},
		{"expected twice", wire.HdrExpectedVersion, []string{"1", "1"}, next},
		{"base leading zero", wire.HdrBaseVersion, []string{"01"}, appended},
		{"base zero padded", wire.HdrBaseVersion, []string{"0001"}, appended},
		{"base empty", wire.HdrBaseVersion, []string{""}, next},
		{"epoch leading zero", wire.HdrEpoch, []string{"01"}, next},
		{"epoch empty", wire.HdrEpoch, []string{""}, next},
		{"format leading zero", wire.HdrFormat, []string{"01"}, next},
		{"format sign", wire.HdrFormat, []string{"+1"}, next},
		{"format empty", wire.HdrFormat, []string{""}, next},
		{"chunks empty", wire.HdrChunks, []string{""}, next},
		{"chunks twice", wire.HdrChunks, []string{"1", "2"}, nil},
		{"fork version leading zero", wire.HdrForkOf, []string{wk.Token() + ".01"}, next},
		{"fork empty", wire.HdrForkOf, []string{""}, next},
		{"fork twice", wire.HdrForkOf, []string{wk.Token() + ".1", wk.Token() + ".2"}, next},
		{"import version leading zero", wire.HdrImportVersion, []string{"02"}, next},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := nats.Header{c.header: c.values}
			if c.header == wire.HdrImportVersion {
				for k, v := range importHeaders("2", next) {
					if k != wire.HdrImportVersion {
						h.Set(k, v)
					}
				}
			}
			for _, path := range []string{"ingest", "request"} {
				saveID := fmt.Sprintf("d%d-%s", i, path)
				res := saveRawHeader(t, nc, js, wk, path, saveID, h, c.body)
				requireRefused(t, res, wire.CodeBadRequest, "header "+c.header)
			}
		})
	}
	hist, err := env.Client.History(ctx, key)
	require.NoError(t, err)
	require.Len(t, hist, 1, "nothing stored")

	// The same numbers written plainly are taken.
	res := saveRawHeader(t, nc, js, wk, "request", "plain", nats.Header{wire.HdrBaseVersion: {"1"}, wire.HdrFormat: {"1"}}, appended)
	require.True(t, res.OK, "%+v", res.Error)
	require.Equal(t, uint64(2), res.Version.Version)
}

// saveRawHeader sends a save of key with headers h (each value as given: empty, repeated) on
// path "ingest" (a JetStream publish, its result read from CP_RESULTS) or "request" (a save
// request, its result in the reply).
func saveRawHeader(t testing.TB, nc *nats.Conn, js jetstream.JetStream, key wire.Key, path, saveID string, h nats.Header, body []byte) wire.SaveResult {
	t.Helper()
	subject := wire.SaveSubject(key)
	if path == "ingest" {
		subject = wire.IngestSubject(key)
	}
	m := &nats.Msg{Subject: subject, Header: nats.Header{wire.HdrSaveID: {saveID}}, Data: body}
	for k, v := range h {
		m.Header[k] = append([]string(nil), v...)
	}
	var data []byte
	if path == "ingest" {
		sub, err := nc.SubscribeSync(wire.ResultSubject(key.Namespace, saveID))
		require.NoError(t, err)
		defer func() { _ = sub.Unsubscribe() }()
		// A message id of its own: a save id sent again is a new publish to JetStream.
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		_, err = js.PublishMsg(ctx, m, jetstream.WithMsgID(saveID+"/"+nuid.Next()))
		require.NoError(t, err)
		r, err := sub.NextMsg(15 * time.Second)
		require.NoError(t, err, "every acknowledged save gets a result")
		data = r.Data
	} else {
		r, err := nc.RequestMsg(m, 15*time.Second)
		require.NoError(t, err, "a save request is answered")
		data = r.Data
	}
	var res wire.SaveResult
	require.NoError(t, json.Unmarshal(data, &res), string(data))
	return res
}
