package transfer_test

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// The saves after a refused one are refused unread, but their save ids still name what the daemon
// announces on cp.saved and echoes in the reply: a hostile item's save id (empty, a megabyte, not
// UTF-8) must be checked as any save id is, never used as it came. A megabyte save id announced as
// it came makes a subject past the server's control line, and the server cuts the daemon's
// connection.
func TestSaveGroup_SaveIDsAfterARefusalAreChecked(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	nc := env.Conn()
	key := checkpoint.Key{Session: "after a refusal"}.WithDefaults()
	watch, err := nc.SubscribeSync(strings.TrimSuffix(wire.SavedSubject(key.Namespace, "x"), "x") + ">")
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	refused := groupItem{fields: [][2]string{{wire.HdrSaveID, "refused"}, {wire.HdrBaseVersion, "01"}}, body: oneMessage("x", 0)}
	huge := strings.Repeat("é", 300_000)
	for i, c := range []struct {
		name, id string
		says     string // a refusal of the whole group, "" if save 1 alone is refused
	}{
		{"a megabyte", huge, "save 1 (at byte 82 of the body): field bytes 600014: at most 65536"},
		{"past 256 bytes", strings.Repeat("é", 129), ""},
		{"none", "", ""},
		{"not UTF-8", "\xff\xfe", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			after := groupItem{body: oneMessage("x", 1)}
			if c.id != "" {
				after.fields = [][2]string{{wire.HdrSaveID, c.id}}
			}
			rep := requestGroup(t, nc, wire.SaveSubject(key), map[string]string{wire.HdrGroup: "2"}, groupBody(refused, after))
			if c.says != "" {
				require.NotNil(t, rep.Error)
				require.Equal(t, wire.CodeBadRequest, rep.Error.Code)
				require.Contains(t, rep.Error.Message, c.says)
			} else {
				require.Nil(t, rep.Error)
				require.Len(t, rep.Results, 2)
				require.Equal(t, wire.CodeBadRequest, rep.Results[0].Error.Code)
				require.NotNil(t, rep.Results[1].Error)
				require.True(t, rep.Results[1].SaveID == "", "an invalid save id is not echoed (%d bytes)", len(rep.Results[1].SaveID))
				require.Equal(t, wire.CodeBadRequest, rep.Results[1].Error.Code, rep.Results[1].Error.Message)
				require.Contains(t, rep.Results[1].Error.Message, "group save 1: bad request: header Cp-Save-Id")
				m, err := watch.NextMsg(5 * time.Second)
				require.NoError(t, err)
				require.Equal(t, wire.SavedSubject(key.Namespace, "refused"), m.Subject, "the refused save's result is announced")
			}
			// The daemon still serves, on the connection it had, and announced nothing else.
			v, err := env.Client.Save(ctx, checkpoint.Key{Namespace: "elsewhere", Session: fmt.Sprint("still ", i)}, oneMessage("y", 0))
			require.NoError(t, err)
			require.Equal(t, uint64(1), v.Version)
			_, err = watch.NextMsg(100 * time.Millisecond)
			require.ErrorIs(t, err, nats.ErrTimeout, "nothing else announced in the namespace")
		})
	}
	require.Zero(t, env.NC.Stats().Reconnects, "the daemon's connection was never cut")
	require.Zero(t, natsEvents(t, env.Registry, "disconnect"), "disconnects counted")
}

// A group refused for its framing is answered whatever its bytes: the refusal names the bytes at
// fault, bounded, so a megabyte field of bytes that quote four times over does not make a reply
// past the server's max payload (which nobody would get).
func TestSaveGroup_FramingRefusalsAreAnsweredWhateverTheirBytes(t *testing.T) {
	env := testenv.Start(t)
	nc := env.Conn()
	key := checkpoint.Key{Session: "quoted"}.WithDefaults()
	junk := strings.Repeat("\x01", 300_000)
	quotes := strings.Repeat("\x01", 60_000) // within an item's fields, quoted: 300 KB
	for _, c := range []struct{ name, fields string }{
		{"a field without a colon", junk + "\r\n"},
		{"an unknown field", junk + ": x\r\n"},
		{"a field without its CRLF", "Cp-Save-Id: x\r\n" + junk},
		{"60 KB without a colon", quotes + "\r\n"},
		{"60 KB of an unknown field", quotes + ": x\r\n"},
		{"60 KB without a CRLF", "Cp-Save-Id: x\r\n" + quotes},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := []byte(fmt.Sprintf("%d 2\r\n%s[]", len(c.fields), c.fields))
			rep := requestGroup(t, nc, wire.SaveSubject(key), map[string]string{wire.HdrGroup: "1"}, body)
			require.NotNil(t, rep.Error)
			require.Equal(t, wire.CodeBadRequest, rep.Error.Code)
			require.Contains(t, rep.Error.Message, "save 0")
			require.Less(t, len(rep.Error.Message), 1024, "%.200s", rep.Error.Message)
		})
	}
}

// A group of zstd bombs, each a small frame that decodes to --max-checkpoint-bytes: admitted by
// its few kilobytes, it must not hold k times the max checkpoint bytes. The budget lets one save
// (the oldest) past it by one max checkpoint; a group takes that exemption as one save does, and
// its later saves wait for room within the budget, then are refused busy (sent again, not stored)
// while those read go on. Appends within the budget still go through whole; and a group larger
// than the budget is stored in the end by the SDK, which sends the busy rest again.
func TestSaveGroup_ZstdBombsHoldOneMaxCheckpoint(t *testing.T) {
	const maxBytes, budget = 2 << 20, 1 << 20
	env := testenv.Start(t, func(c *transfer.Config) { c.MaxCheckpointBytes, c.IngestBudgetBytes = maxBytes, budget })
	ctx := ctxT(t)
	nc := env.Conn()
	key := checkpoint.Key{Session: "bombs"}.WithDefaults()
	transfer.HoldIngestBudgetBut(env.Daemon, budget, 100*time.Millisecond)() // saves wait 100 ms for room, not 2 s
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedBestCompression))
	require.NoError(t, err)
	bomb := enc.EncodeAll(make([]byte, maxBytes-1024), nil)
	const k = 16
	var items []groupItem
	for i := 0; i < k; i++ {
		items = append(items, groupItem{fields: [][2]string{{wire.HdrSaveID, fmt.Sprint("bomb-", i)}, {wire.HdrEncoding, wire.EncodingZstd}}, body: bomb})
	}
	body := groupBody(items...)
	// One bomb sent alone, refused (not JSON): what one save may hold, the exemption included.
	alone := nats.NewMsg(wire.SaveSubject(key))
	alone.Header.Set(wire.HdrSaveID, "alone")
	alone.Header.Set(wire.HdrEncoding, wire.EncodingZstd)
	alone.Data = bomb
	_, err = nc.RequestMsg(alone, 10*time.Second)
	require.NoError(t, err)
	one := transfer.IngestBudgetPeakBytes(env.Daemon)
	rep := requestGroup(t, nc, wire.SaveSubject(key), map[string]string{wire.HdrGroup: fmt.Sprint(k)}, body)
	peak := transfer.IngestBudgetPeakBytes(env.Daemon)
	t.Logf("a group of %d bombs of %d bytes each (%d decoded): the budget's peak %d bytes, one sent alone %d (budget %d, max checkpoint %d)", k, len(bomb), maxBytes-1024, peak, one, budget, maxBytes)
	require.LessOrEqual(t, peak, one+budget, "a group held more than one save sent alone may, and the budget")
	if rep.Error == nil {
		require.Len(t, rep.Results, k)
		require.Equal(t, wire.CodeInvalid, rep.Results[0].Error.Code, rep.Results[0].Error.Message)
	}
	_, err = env.Client.Get(ctx, key, 0)
	require.ErrorIs(t, err, checkpoint.ErrNotFound, "nothing stored")

	// Appends larger together than the budget: stored, in order, none lost.
	big := func(i int) []byte {
		return []byte(fmt.Sprintf(`[{"role":"user","content":"%d %s"}]`, i, strings.Repeat("a", 400<<10)))
	}
	start := time.Now()
	var futures []*checkpoint.AppendFuture
	for i := 0; i < 4; i++ { // 1.6 MB together: past the budget, within the max checkpoint
		futures = append(futures, env.Client.AppendAsync(ctx, key, big(i)))
	}
	for i, f := range futures {
		v, err := f.Wait(ctx)
		require.NoError(t, err, "append %d", i)
		require.Equal(t, uint64(i+1), v.Version)
	}
	t.Logf("appends past the budget stored in %s; saves refused busy: %v", time.Since(start), opsSample(t, env.Registry, "checkpointd_saves_total", map[string]string{"path": "request", "result": "busy"}))
}

// A group mixing whole arrays (extending the head, or rewriting it), appends and expected
// versions is stored as the same saves sent alone would be; a save past --max-checkpoint-bytes in
// a group is refused as it is alone (too_large), those before it stored.
func TestSaveGroup_MixedSavesAsAlone(t *testing.T) {
	const maxBytes = 64 << 10
	env := testenv.Start(t, func(c *transfer.Config) { c.MaxCheckpointBytes = maxBytes })
	ctx := ctxT(t)
	nc := env.Conn()
	key := checkpoint.Key{Session: "mixed"}.WithDefaults()
	whole := func(id string, body string, fields ...[2]string) groupItem {
		return groupItem{fields: append([][2]string{{wire.HdrSaveID, id}}, fields...), body: []byte(body)}
	}
	m := func(s string) string { return `{"role":"user","content":"` + s + `"}` }
	items := []groupItem{
		whole("w1", "["+m("a")+"]", [2]string{wire.HdrExpectedVersion, "0"}),
		appendItem("a2", 1, []byte("["+m("b")+"]")),
		whole("w3", "["+m("a")+","+m("b")+","+m("c")+"]", [2]string{wire.HdrExpectedVersion, "2"}),
		whole("r4", "["+m("x")+"]"), // a rewrite
		appendItem("a5", 4, []byte("["+m("y")+"]")),
		whole("big", "["+m(strings.Repeat("z", maxBytes))+"]"),
		appendItem("a7", 6, []byte("["+m("never")+"]")),
	}
	rep := requestGroup(t, nc, wire.SaveSubject(key), map[string]string{wire.HdrGroup: fmt.Sprint(len(items))}, groupBody(items...))
	require.Nil(t, rep.Error)
	for i := 0; i < 5; i++ {
		require.Nil(t, rep.Results[i].Error, "save %d: %+v", i, rep.Results[i].Error)
		require.Equal(t, uint64(i+1), rep.Results[i].Version.Version)
	}
	require.Equal(t, wire.CodeTooLarge, rep.Results[5].Error.Code, rep.Results[5].Error.Message)
	require.Equal(t, wire.CodeConflict, rep.Results[6].Error.Code)
	for v, want := range map[uint64]string{3: "[" + m("a") + "," + m("b") + "," + m("c") + "]", 5: "[" + m("x") + "," + m("y") + "]"} {
		got, _, err := env.Client.Restore(ctx, key, v)
		require.NoError(t, err)
		require.JSONEq(t, want, string(got), "version %d", v)
	}
	// An expected version that no longer holds, inside a group: a conflict, those before stored.
	rep = requestGroup(t, nc, wire.SaveSubject(key), map[string]string{wire.HdrGroup: "2"},
		groupBody(appendItem("a6", 5, []byte("["+m("6")+"]")), whole("w7", "["+m("x")+"]", [2]string{wire.HdrExpectedVersion, "5"})))
	require.Nil(t, rep.Results[0].Error)
	require.Equal(t, wire.CodeConflict, rep.Results[1].Error.Code, rep.Results[1].Error.Message)
	require.Contains(t, rep.Results[1].Error.Message, "group save 1")
}

// The example of docs/protocol.md §4.0.1, read from the docs and sent byte for byte to a session
// at version 7: two versions, 8 and 9, as it says. (A client written from the docs alone frames
// its groups as the example does.)
func TestSaveGroup_TheDocsExample(t *testing.T) {
	doc, err := os.ReadFile("../../docs/protocol.md")
	require.NoError(t, err)
	text := string(doc)
	at := strings.Index(text, "For example, a group of two appends onto version 7")
	require.Positive(t, at, "the example is in §4.0.1")
	block := text[at:]
	block = block[strings.Index(block, "```\n")+4:]
	block = block[:strings.Index(block, "```")]
	hdr := map[string]string{}
	var body []byte
	for _, line := range strings.Split(strings.TrimSpace(block), "\n") {
		if name, rest, ok := strings.Cut(line, ":"); ok && (name == "headers" || name == "body") {
			line = rest
		}
		line = strings.TrimSpace(line)
		if k, v, ok := strings.Cut(line, ": "); ok && !strings.Contains(line, `\r\n`) {
			hdr[k] = v
			continue
		}
		body = append(body, strings.ReplaceAll(line, `\r\n`, "\r\n")...)
	}
	ctx := ctxT(t)
	env := testenv.Start(t)
	key := checkpoint.Key{Session: "docs example"}.WithDefaults()
	for i := 0; i < 7; i++ {
		_, err := env.Client.Append(ctx, key, uint64(i), oneMessage("before", i))
		require.NoError(t, err)
	}
	rep := requestGroup(t, env.Conn(), wire.SaveSubject(key), hdr, body)
	require.Nil(t, rep.Error, "%+v", rep.Error)
	require.Len(t, rep.Results, 2)
	for i, res := range rep.Results {
		require.Nil(t, res.Error, "%+v", res.Error)
		require.Equal(t, fmt.Sprint("t-", 8+i), res.SaveID)
		require.Equal(t, uint64(8+i), res.Version.Version)
	}
	v, err := env.Client.Get(ctx, key, 9)
	require.NoError(t, err)
	require.Equal(t, "host-1/4242", v.Writer)
}

// A namespace whose writers send groups sends save requests: one of its saves later off the ingest
// stream (a fallback while no daemon answered) is no sign of a missing cp.save import, and is not
// warned about (TestDaemon_WarnsOfANamespaceSavingOnlyOffTheIngestStream).
func TestSaveGroup_CountsAsARequestForTheImportWarning(t *testing.T) {
	logs := &lockedBuffer{}
	env := testenv.Start(t, func(c *transfer.Config) { c.Logger = slog.New(slog.NewTextHandler(logs, nil)) })
	nc := env.Conn()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	modern := wire.Key{Namespace: "modern", Session: "s"}.WithDefaults()
	res := saveRawHeader(t, nc, js, modern, "request", "m1", nil, []byte(`[{"role":"user","content":"by request"}]`))
	require.True(t, res.OK, "%+v", res.Error)
	grouped := wire.Key{Namespace: "grouped", Session: "s"}.WithDefaults()
	rep := requestGroup(t, nc, wire.SaveSubject(grouped), map[string]string{wire.HdrGroup: "2"},
		groupBody(appendItem("g1", 0, oneMessage("g", 0)), appendItem("g2", 1, oneMessage("g", 1))))
	require.Nil(t, rep.Error)
	time.Sleep(1100 * time.Millisecond) // past the margin allowed for the server's and the daemon's clocks
	res = saveRawHeader(t, nc, js, grouped, "ingest", "g3", nil, []byte(wholeOf("g", 3)))
	require.True(t, res.OK, "%+v", res.Error)
	require.NotContains(t, logs.String(), "come off the ingest stream while save requests work")
}

// The same save id twice in one group: the same save sent twice is one version (the second a
// duplicate of it); other bytes under it are refused save_id_reused, nothing after stored. A save
// id of an earlier group is a duplicate there too.
func TestSaveGroup_ASaveIDTwiceInAGroup(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	nc := env.Conn()
	key := checkpoint.Key{Session: "twice"}.WithDefaults()
	a := appendItem("a", 0, oneMessage("t", 0))
	rep := requestGroup(t, nc, wire.SaveSubject(key), map[string]string{wire.HdrGroup: "3"},
		groupBody(a, a, appendItem("b", 1, oneMessage("t", 1))))
	require.Nil(t, rep.Error)
	require.True(t, rep.Results[0].OK && !rep.Results[0].Duplicate)
	require.True(t, rep.Results[1].OK && rep.Results[1].Duplicate, "%+v", rep.Results[1].Error)
	require.Equal(t, uint64(1), rep.Results[1].Version.Version)
	require.Equal(t, uint64(2), rep.Results[2].Version.Version)

	rep = requestGroup(t, nc, wire.SaveSubject(key), map[string]string{wire.HdrGroup: "3"},
		groupBody(appendItem("c", 2, oneMessage("t", 2)), appendItem("c", 3, oneMessage("t", 3)), appendItem("d", 3, oneMessage("t", 3))))
	require.Nil(t, rep.Error)
	require.True(t, rep.Results[0].OK)
	require.Equal(t, wire.CodeSaveIDReused, rep.Results[1].Error.Code, rep.Results[1].Error.Message)
	require.Equal(t, wire.CodeConflict, rep.Results[2].Error.Code)
	head, err := env.Client.Get(ctx, key, 0)
	require.NoError(t, err)
	require.Equal(t, uint64(3), head.Version)

	rep = requestGroup(t, nc, wire.SaveSubject(key), map[string]string{wire.HdrGroup: "2"},
		groupBody(appendItem("b", 1, oneMessage("t", 1)), appendItem("e", 3, oneMessage("t", 3))))
	require.True(t, rep.Results[0].OK && rep.Results[0].Duplicate, "%+v", rep.Results[0].Error)
	require.Equal(t, uint64(2), rep.Results[0].Version.Version)
	require.True(t, rep.Results[1].OK, "the group goes on from the head: %+v", rep.Results[1].Error)
	require.Equal(t, uint64(4), rep.Results[1].Version.Version)
}
