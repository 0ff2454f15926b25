package transfer_test

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/wire"
)

func TestBundle_ExportImportRoundTrip(t *testing.T) {
	src, dst := testenv.Start(t), testenv.Start(t)
	ctx := ctxT(t)
	corpus := checkpoint.Key{Namespace: "ns/1", Session: "user@example.com/a.b*c >d"}
	growing(t, src.Client, corpus, "pi_before_compaction.json", 100)
	ugly := checkpoint.Key{Namespace: "ns/1", Session: "ugly", Agent: "ägent"}
	conv := []byte(`[{"role":"user","content":"<b>&amp; \u2028 ∑ 🤖","n":123456789012345678901234567890.000000000000000000001,"x":{"unknown":[1e400,-0]}}]`)
	_, err := src.Client.Save(ctx, ugly, conv)
	require.NoError(t, err)
	_, err = src.Client.Save(ctx, ugly, []byte(`[{"role":"user","content":"rewritten <history>"}]`))
	require.NoError(t, err, "a rewrite: the bundle holds it whole")

	file := filepath.Join(t.TempDir(), "b.cpbundle")
	f, err := os.Create(file)
	require.NoError(t, err)
	sum, err := src.Client.Export(ctx, f, []checkpoint.Key{corpus, ugly}, checkpoint.ExportOptions{Source: src.URL()})
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.Equal(t, 12, sum.Versions)
	st, err := os.Stat(file)
	require.NoError(t, err)
	t.Logf("bundle: %d versions, %d bytes whole, %d bytes on disk", sum.Versions, sum.Bytes, st.Size())
	require.Less(t, st.Size(), int64(400_000), "versions share their messages in the bundle, as in the store")

	got, n, err := dst.Client.ImportBundle(ctx, file, checkpoint.ImportOptions{})
	require.NoError(t, err)
	require.Equal(t, 12, n)
	require.Len(t, got.Sessions, 2)
	for _, key := range []checkpoint.Key{corpus, ugly} {
		hs, err := src.Client.History(ctx, key)
		require.NoError(t, err)
		hd, err := dst.Client.History(ctx, key)
		require.NoError(t, err)
		require.Len(t, hd, len(hs))
		for i := range hs {
			require.Equal(t, hs[i].Hash, hd[i].Hash)
			require.Equal(t, hs[i].Version, hd[i].Version)
			require.Equal(t, wire.ReasonImport, hd[i].Origin.Via)
			a, _, err := src.Client.Restore(ctx, key, hs[i].Version)
			require.NoError(t, err)
			b, _, err := dst.Client.Restore(ctx, key, hs[i].Version)
			require.NoError(t, err)
			require.Equal(t, string(a), string(b))
		}
	}
	first, _, err := dst.Client.Restore(ctx, ugly, 1)
	require.NoError(t, err)
	testenv.RequireSameConversation(t, conv, first)

	_, n, err = dst.Client.ImportBundle(ctx, file, checkpoint.ImportOptions{})
	require.NoError(t, err)
	require.Zero(t, n, "importing twice imports nothing new")
}

func TestBundle_BadBundlesImportNothing(t *testing.T) {
	src, dst := testenv.Start(t), testenv.Start(t)
	ctx := ctxT(t)
	a, b := checkpoint.Key{Session: "a"}, checkpoint.Key{Session: "b"}
	growing(t, src.Client, a, "pi_before_compaction.json", 200)
	growing(t, src.Client, b, "pi_before_compaction.json", 300)
	var buf bytes.Buffer
	_, err := src.Client.Export(ctx, &buf, []checkpoint.Key{a, b}, checkpoint.ExportOptions{})
	require.NoError(t, err)
	good := buf.Bytes()

	// A bundle whose entry was altered but whose archive is intact: only the checksums catch it.
	tampered := rewriteBundle(t, good, func(name string, data []byte) []byte {
		if name == "versions/000003.json" {
			return bytes.Replace(data, []byte(`"role":"user"`), []byte(`"role":"USER"`), 1)
		}
		return data
	})
	future := rewriteBundle(t, good, func(name string, data []byte) []byte {
		if name == "checkpointd-bundle.json" {
			return bytes.Replace(data, []byte(`"version":1`), []byte(`"version":99`), 1)
		}
		return data
	})
	flipped := bytes.Clone(good)
	flipped[len(flipped)/2] ^= 0x40
	cases := map[string]struct {
		data []byte
		want string
	}{
		"truncated at the end": {good[:len(good)-64], "truncated"},
		"truncated in half":    {good[:len(good)/2], "truncated"},
		"a flipped byte":       {flipped, "bad bundle"},
		"an altered entry":     {tampered, "versions/000003.json"},
		"a future version":     {future, "bundle version 99"},
		"not a bundle":         {[]byte("[]"), "bad bundle"},
		"an empty file":        {nil, "bad bundle"},
	}
	dir := t.TempDir()
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			file := filepath.Join(dir, name)
			require.NoError(t, os.WriteFile(file, c.data, 0o600))
			_, n, err := dst.Client.ImportBundle(ctx, file, checkpoint.ImportOptions{})
			require.ErrorIs(t, err, checkpoint.ErrBadBundle)
			require.ErrorContains(t, err, c.want)
			require.Zero(t, n)
			list, err := dst.Client.List(ctx, "")
			require.NoError(t, err)
			require.Empty(t, list, "nothing was imported")
		})
	}

	// A bundle that contradicts a session here imports nothing, not even its other sessions.
	_, err = dst.Client.Save(ctx, b, []byte(`[{"role":"user","content":"another b"}]`))
	require.NoError(t, err)
	file := filepath.Join(dir, "good")
	require.NoError(t, os.WriteFile(file, good, 0o600))
	_, _, err = dst.Client.ImportBundle(ctx, file, checkpoint.ImportOptions{})
	require.ErrorIs(t, err, checkpoint.ErrConflict)
	_, err = dst.Client.Get(ctx, a, 0)
	require.ErrorIs(t, err, checkpoint.ErrNotFound)
}

// rewriteBundle decompresses a bundle, passes every entry through change, and compresses it again.
func rewriteBundle(t *testing.T, bundle []byte, change func(name string, data []byte) []byte) []byte {
	t.Helper()
	zr, err := zstd.NewReader(bytes.NewReader(bundle))
	require.NoError(t, err)
	defer zr.Close()
	tr := tar.NewReader(zr)
	var out bytes.Buffer
	zw, err := zstd.NewWriter(&out)
	require.NoError(t, err)
	tw := tar.NewWriter(zw)
	for {
		hdr, err := tr.Next()
		if err != nil {
			break
		}
		var data bytes.Buffer
		_, err = data.ReadFrom(tr)
		require.NoError(t, err)
		b := change(hdr.Name, data.Bytes())
		hdr.Size = int64(len(b))
		require.NoError(t, tw.WriteHeader(hdr))
		_, err = tw.Write(b)
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	require.NoError(t, zw.Close())
	return out.Bytes()
}

// A bundle never un-seals a session that was migrated away: its versions live elsewhere now.
func TestBundle_MovedSessionIsNotImportedInto(t *testing.T) {
	src, dst := testenv.Start(t), testenv.Start(t)
	ctx := ctxT(t)
	key := checkpoint.Key{Session: "moved"}
	convs := growing(t, src.Client, key, "openhands_gui_todo_app.json", 6)
	var old bytes.Buffer
	_, err := src.Client.Export(ctx, &old, []checkpoint.Key{key}, checkpoint.ExportOptions{})
	require.NoError(t, err)
	_, err = src.Client.Migrate(ctx, dst.Client, key, checkpoint.MigrateOptions{MovedTo: dst.URL()})
	require.NoError(t, err)
	// At the new home the session goes on; its bundle then reaches the old home.
	_, err = dst.Client.Save(ctx, key, turn(convs[len(convs)-1], "dst", 1))
	require.NoError(t, err)
	var newer bytes.Buffer
	_, err = dst.Client.Export(ctx, &newer, []checkpoint.Key{key}, checkpoint.ExportOptions{})
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "newer")
	require.NoError(t, os.WriteFile(file, newer.Bytes(), 0o600))
	_, n, err := src.Client.ImportBundle(ctx, file, checkpoint.ImportOptions{})
	require.ErrorIs(t, err, checkpoint.ErrMoved)
	require.Zero(t, n)
	_, err = src.Client.Save(ctx, key, []byte(`[]`))
	require.ErrorIs(t, err, checkpoint.ErrMoved, "still sealed")
	// An old bundle with nothing new is harmless.
	oldFile := filepath.Join(t.TempDir(), "old")
	require.NoError(t, os.WriteFile(oldFile, old.Bytes(), 0o600))
	_, n, err = src.Client.ImportBundle(ctx, oldFile, checkpoint.ImportOptions{})
	require.NoError(t, err)
	require.Zero(t, n)
}
