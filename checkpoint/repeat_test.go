package checkpoint_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// The SDK's own check of a duplicate (what the daemon cannot tell: a chunked save whose chunks it
// already removed, or a daemon before save_id_reused): the version must hash as the conversation
// Save stores, once made canonical; where the SDK cannot know what the daemon stored (local image
// paths, which a daemon may redact) it does not claim a reuse.
func TestCheckRepeat(t *testing.T) {
	first := []byte(`[{"role":"user","content":"first"}]`)
	v := checkpoint.Version{Version: 3, Hash: wire.Hash(first)}
	requireCompared := func(whole []byte, msg string) {
		t.Helper()
		compared, err := checkpoint.CheckRepeat(v, whole)
		require.NoError(t, err, msg)
		require.True(t, compared, msg)
	}
	requireCompared(first, "the same")
	requireCompared([]byte("[\n  {\"role\": \"user\", \"content\": \"first\"}\n]"), "the same, not canonical")

	compared, err := checkpoint.CheckRepeat(v, []byte(`[{"role":"user","content":"other"}]`))
	require.True(t, compared)
	require.ErrorIs(t, err, checkpoint.ErrSaveIDReused)
	require.ErrorIs(t, err, checkpoint.ErrConflict)
	var e *checkpoint.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, uint64(3), e.Version)
	require.Contains(t, e.Message, `"turn-1"`)

	local := []byte(`[{"role":"user","content":[{"type":"image","mimeType":"image/png","url":"file:///Users/alice/a.png"}]}]`)
	compared, err = checkpoint.CheckRepeat(v, local)
	require.NoError(t, err)
	require.False(t, compared, "a daemon may have redacted the path: cannot tell")
}
