package transfer_test

import (
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/codec"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer"
	"github.com/checkpointd/checkpointd/internal/wire"
)

const withLocalImage = `[{"role":"user","content":"what is on my screen?"},` +
	`{"role":"user","content":[{"type":"image","mimeType":"image/png","url":"file:///Users/alice/Desktop/secret-plan.png"}]}]`

// By default a save whose image names a local file is refused, naming message and field; nothing is
// stored.
func TestImagePaths_RefusedByDefault(t *testing.T) {
	env := testenv.Start(t)
	js, err := jetstream.New(env.Conn())
	require.NoError(t, err)
	key := wire.Key{Session: "screens"}.WithDefaults()
	publishRaw(t, js, wire.IngestSubject(key), nats.Header{wire.HdrSaveID: {"img-1"}}, withLocalImage)
	res := awaitStoredResult(t, js, wire.ResultSubject(key.Namespace, "img-1"))
	require.NotNil(t, res.Error)
	require.Equal(t, wire.CodeInvalid, res.Error.Code)
	require.Equal(t, 1, *res.Error.Index)
	require.Equal(t, "content[0].url", res.Error.Field)
	require.NotContains(t, res.Error.Message, "alice")

	_, err = env.Client.Save(ctxT(t), checkpoint.Key{Session: "screens"}, []byte(withLocalImage))
	require.ErrorIs(t, err, checkpoint.ErrInvalid)
	_, err = env.Client.Get(ctxT(t), checkpoint.Key{Session: "screens"}, 0)
	require.ErrorIs(t, err, checkpoint.ErrNotFound)
}

// With --image-paths redact the path is replaced by a marker keeping the extension, in storage and
// in every restore; later whole-array saves of the same (unredacted) array are appends, not rewrites.
func TestImagePaths_Redacted(t *testing.T) {
	env := testenv.Start(t, func(c *transfer.Config) { c.ImagePaths = codec.ImagePathsRedact })
	ctx := ctxT(t)
	key := checkpoint.Key{Session: "screens"}
	v1, err := env.Client.Save(ctx, key, []byte(withLocalImage))
	require.NoError(t, err)
	got, _, err := env.Client.Restore(ctx, key, v1.Version)
	require.NoError(t, err)
	require.NotContains(t, string(got), "alice")
	require.NotContains(t, string(got), "secret-plan")
	require.Contains(t, string(got), `"url":"redacted:local-file.png"`)

	grown := withLocalImage[:len(withLocalImage)-1] + `,{"role":"user","content":"and now?"}]`
	c, err := checkpoint.Connect(env.URL(), nil) // a fresh client sends the whole array
	require.NoError(t, err)
	defer c.Close()
	v2, err := c.Save(ctx, key, []byte(grown))
	require.NoError(t, err)
	require.Equal(t, v1.Gen, v2.Gen, "the redacted messages matched what is stored: no rewrite")
	got, _, err = env.Client.Restore(ctx, key, v2.Version)
	require.NoError(t, err)
	require.NotContains(t, string(got), "alice")
	require.Contains(t, string(got), "and now?")
}
