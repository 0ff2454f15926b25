package transfer_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// TestDialects_SaveRestore: a save names its dialect; the version records it (native records
// have no dialect field, as before); restore returns the bytes as saved; appends, forks and a
// session's one dialect are honoured.
func TestDialects_SaveRestore(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	chat, err := os.ReadFile("../../testdata/dialects/openai-chat.json")
	require.NoError(t, err)
	key := checkpoint.Key{Session: "chat"}

	t.Run("refused as native", func(t *testing.T) {
		_, err := env.Client.Save(ctx, key, chat)
		require.ErrorIs(t, err, checkpoint.ErrInvalid)
	})
	t.Run("saved and restored byte for byte", func(t *testing.T) {
		v, err := env.Client.Save(ctx, key, chat, checkpoint.WithDialect("openai-chat"))
		require.NoError(t, err)
		require.Equal(t, "openai-chat", v.Dialect)
		require.Equal(t, 2, v.Counts.System)
		require.Equal(t, 2, v.Counts.ToolCalls)
		got, rv, err := env.Client.Restore(ctx, key, 0)
		require.NoError(t, err)
		require.JSONEq(t, string(chat), string(got))
		require.Equal(t, compactJSON(t, chat), string(got), "every field and digit as saved")
		require.Equal(t, "openai-chat", rv.Dialect)
	})
	t.Run("append validated in the session's dialect", func(t *testing.T) {
		head, _, err := env.Client.Restore(ctx, key, 0)
		require.NoError(t, err)
		v, err := env.Client.Append(ctx, key, 1, []byte(`[{"role":"user","content":"Thanks"}]`), checkpoint.WithDialect("openai-chat"))
		require.NoError(t, err)
		require.Equal(t, "openai-chat", v.Dialect)
		_, err = env.Client.Append(ctx, key, 2, []byte(`[{"role":"tool","content":"x"}]`), checkpoint.WithDialect("openai-chat"))
		var ce *checkpoint.Error
		require.ErrorAs(t, err, &ce)
		require.Equal(t, len(messagesOf(t, head))+1, ce.Index, "the index is the conversation's")
		require.Equal(t, "tool_call_id", ce.Field)
	})
	t.Run("views cut by the dialect's rules", func(t *testing.T) {
		msgs := messagesOf(t, chat) // system, developer, user, assistant (tool calls), tool, tool, assistant
		got, _, err := env.Client.Restore(ctx, key, 1, checkpoint.WithMaxMessages(2))
		require.NoError(t, err)
		want, err := json.Marshal([]json.RawMessage{msgs[0], msgs[1], msgs[6]})
		require.NoError(t, err)
		require.Equal(t, compactJSON(t, want), string(got), "the instructions stay; no view starts with a tool message")
	})
	t.Run("a session keeps one dialect", func(t *testing.T) {
		_, err := env.Client.Save(ctx, key, []byte(`[{"role":"user","content":"hi"}]`))
		require.ErrorIs(t, err, checkpoint.ErrBadRequest)
		require.Contains(t, err.Error(), "holds openai-chat conversations and this save is native")
	})
	t.Run("a fork keeps the dialect", func(t *testing.T) {
		v, err := env.Client.Fork(ctx, key, 1, checkpoint.Key{Session: "chat-fork"})
		require.NoError(t, err)
		require.Equal(t, "openai-chat", v.Dialect)
	})
	t.Run("native records carry no dialect", func(t *testing.T) {
		nk := checkpoint.Key{Session: "plain"}
		_, err := env.Client.Save(ctx, nk, []byte(`[{"role":"user","content":"hi"}]`), checkpoint.WithDialect("native"))
		require.NoError(t, err)
		k := nk.WithDefaults()
		rec, err := env.Daemon.Engine.Head(ctx, engine.Key{Namespace: k.Namespace, Session: k.Session, Agent: k.Agent})
		require.NoError(t, err)
		require.Empty(t, rec.Dialect, "stored as no dialect")
		m, err := env.NC.Request(wire.APISubject(k.Namespace, wire.OpGet), []byte(`{"session":"plain"}`), 5*time.Second)
		require.NoError(t, err)
		require.NotContains(t, string(m.Data), `"dialect"`)
	})
}

// TestDialects_UnknownDialectHeader: a raw save naming a dialect nobody knows is a bad_request
// naming the header and the known dialects; nothing is stored.
func TestDialects_UnknownDialectHeader(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	key := checkpoint.Key{Session: "raw"}.WithDefaults()
	js, err := jetstream.New(env.NC)
	require.NoError(t, err)
	sub, err := env.NC.SubscribeSync(wire.ResultSubject(wire.DefaultNamespace, "dia-1"))
	require.NoError(t, err)
	m := nats.NewMsg(wire.IngestSubject(key))
	m.Header.Set(wire.HdrSaveID, "dia-1")
	m.Header.Set(wire.HdrDialect, "gpt-4")
	m.Data = []byte(`[{"role":"user","content":"hi"}]`)
	_, err = js.PublishMsg(ctx, m)
	require.NoError(t, err)
	res, err := sub.NextMsg(10 * time.Second)
	require.NoError(t, err)
	var sr wire.SaveResult
	require.NoError(t, json.Unmarshal(res.Data, &sr))
	require.NotNil(t, sr.Error)
	require.Equal(t, wire.CodeBadRequest, sr.Error.Code)
	require.Contains(t, sr.Error.Message, `header Cp-Dialect: unknown dialect "gpt-4" (known: agentsquad, anthropic, antigravity, native, openai-chat, openai-responses, swift-agent)`)
	_, _, err = env.Client.Restore(ctx, key, 0)
	require.ErrorIs(t, err, checkpoint.ErrNotFound)
}

func compactJSON(t *testing.T, b []byte) string {
	t.Helper()
	var out bytes.Buffer
	require.NoError(t, json.Compact(&out, b))
	return out.String()
}

func messagesOf(t *testing.T, conv []byte) []json.RawMessage {
	t.Helper()
	var msgs []json.RawMessage
	require.NoError(t, json.Unmarshal(conv, &msgs))
	return msgs
}

// TestDialects_MigrateAndBundleKeepTheDialect: a copy of a session (migrate, export/import) keeps
// each version's dialect, so the copy validates and restores as the original.
func TestDialects_MigrateAndBundleKeepTheDialect(t *testing.T) {
	src, viaMigrate, viaBundle := testenv.Start(t), testenv.Start(t), testenv.Start(t)
	ctx := ctxT(t)
	conv, err := os.ReadFile("../../testdata/dialects/swift-agent.json")
	require.NoError(t, err)
	key := checkpoint.Key{Session: "swift"}
	_, err = src.Client.Save(ctx, key, conv, checkpoint.WithDialect("swift-agent"))
	require.NoError(t, err)
	_, err = src.Client.Append(ctx, key, 1, []byte(`[{"role":"user","content":[{"type":"text","text":"And Lyon?"}]}]`), checkpoint.WithDialect("swift-agent"))
	require.NoError(t, err)

	file := filepath.Join(t.TempDir(), "swift.cpbundle")
	f, err := os.Create(file)
	require.NoError(t, err)
	_, err = src.Client.Export(ctx, f, []checkpoint.Key{key}, checkpoint.ExportOptions{Source: src.URL()})
	require.NoError(t, err)
	require.NoError(t, f.Close())
	_, n, err := viaBundle.Client.ImportBundle(ctx, file, checkpoint.ImportOptions{})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	_, err = src.Client.Migrate(ctx, viaMigrate.Client, key, checkpoint.MigrateOptions{MovedTo: viaMigrate.URL()})
	require.NoError(t, err)

	want, err := src.Client.History(ctx, key)
	require.NoError(t, err)
	for _, dst := range []*testenv.Env{viaBundle, viaMigrate} {
		got, err := dst.Client.History(ctx, key)
		require.NoError(t, err)
		require.Len(t, got, 2)
		for i := range got {
			require.Equal(t, "swift-agent", got[i].Dialect)
			require.Equal(t, want[i].Hash, got[i].Hash)
		}
	}
}

// TestDialects_ExportRedactsImagePathsInTheDialect: export --redact-image-paths finds local paths
// where the session's dialect keeps its images (here openai-chat's image_url.url).
func TestDialects_ExportRedactsImagePathsInTheDialect(t *testing.T) {
	src := testenv.Start(t, func(c *transfer.Config) { c.ImagePaths = codec.ImagePathsAllow })
	dst := testenv.Start(t)
	ctx := ctxT(t)
	key := checkpoint.Key{Session: "shots"}
	conv := `[{"role":"user","content":[{"type":"image_url","image_url":{"url":"file:///Users/alice/screen.png"}}]}]`
	_, err := src.Client.Save(ctx, key, []byte(conv), checkpoint.WithDialect("openai-chat"))
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "shots.cpbundle")
	f, err := os.Create(file)
	require.NoError(t, err)
	_, err = src.Client.Export(ctx, f, []checkpoint.Key{key}, checkpoint.ExportOptions{Source: src.URL(), RedactImagePaths: true})
	require.NoError(t, err)
	require.NoError(t, f.Close())
	_, _, err = dst.Client.ImportBundle(ctx, file, checkpoint.ImportOptions{})
	require.NoError(t, err, "the destination refuses local paths: only a redacted bundle imports")
	got, v, err := dst.Client.Restore(ctx, key, 1)
	require.NoError(t, err)
	require.Equal(t, "openai-chat", v.Dialect)
	require.Equal(t, `[{"role":"user","content":[{"type":"image_url","image_url":{"url":"redacted:local-file.png"}}]}]`, string(got))
}
