package embedded_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/transfer/embedded"
)

const storeKeyA, storeKeyB = "first store key, long enough", "second store key, long enough"

// saveMarkedVersions saves n versions of one session and returns each version's conversation.
func saveMarkedVersions(t *testing.T, url string, key checkpoint.Key, n int, marker string) [][]byte {
	t.Helper()
	c, err := checkpoint.Connect(url, nil)
	require.NoError(t, err)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var convs [][]byte
	msgs := []string{}
	for i := 0; i < n; i++ {
		msgs = append(msgs, fmt.Sprintf(`{"role":"user","content":"turn %d: %s"}`, i, marker))
		conv := []byte("[" + strings.Join(msgs, ",") + "]")
		_, err := c.Save(ctx, key, conv)
		require.NoError(t, err)
		convs = append(convs, conv)
	}
	return convs
}

// requireEveryVersion restores every version of key and compares it with convs.
func requireEveryVersion(t *testing.T, url string, key checkpoint.Key, convs [][]byte) {
	t.Helper()
	c, err := checkpoint.Connect(url, nil)
	require.NoError(t, err)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i, want := range convs {
		got, _, err := c.Restore(ctx, key, uint64(i+1))
		require.NoError(t, err, "version %d", i+1)
		require.Equal(t, string(want), string(got), "version %d", i+1)
	}
}

// dirDigest maps every file under dir to the SHA-256 of its content: what "touches nothing" compares.
func dirDigest(t *testing.T, dir string) map[string][32]byte {
	t.Helper()
	out := map[string][32]byte{}
	require.NoError(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		out[path] = sha256.Sum256(data)
		return err
	}))
	return out
}

func clientURLOf(s *server.Server) string { return "nats://" + s.Addr().String() }

// A start whose key does not fit the store fails with a clear error and leaves every file as it was;
// the right key then restores every version.
func TestStoreEncryption_WrongMissingOrUnexpectedKeyTouchesNothing(t *testing.T) {
	t.Run("encrypted store", func(t *testing.T) {
		dir := t.TempDir()
		enc := embedded.StoreEncryption{Key: storeKeyA}
		s, stop := runEmbeddedStoppable(t, embedded.ServerConfig{DataDir: dir, Encryption: enc})
		key := checkpoint.Key{Session: "enc"}
		convs := saveMarkedVersions(t, clientURLOf(s), key, 3, "x")
		stop()
		before := dirDigest(t, dir)

		for _, tc := range []struct {
			name string
			enc  embedded.StoreEncryption
			want error
		}{
			{"wrong key", embedded.StoreEncryption{Key: storeKeyB}, embedded.ErrWrongStoreKey},
			{"wrong key, other cipher", embedded.StoreEncryption{Key: storeKeyB, Cipher: server.AES}, embedded.ErrWrongStoreKey},
			{"no key", embedded.StoreEncryption{}, embedded.ErrStoreEncrypted},
		} {
			_, err := embedded.StartServer(embedded.ServerConfig{DataDir: dir, Listen: "127.0.0.1:0", Encryption: tc.enc})
			require.ErrorIs(t, err, tc.want, tc.name)
			require.NotContains(t, err.Error(), storeKeyA, tc.name)
			require.NotContains(t, err.Error(), storeKeyB, tc.name)
			require.Equal(t, before, dirDigest(t, dir), "%s: the data directory changed", tc.name)
		}

		s, _ = runEmbeddedStoppable(t, embedded.ServerConfig{DataDir: dir, Encryption: enc})
		requireEveryVersion(t, clientURLOf(s), key, convs)
	})

	t.Run("plain store", func(t *testing.T) {
		dir := t.TempDir()
		s, stop := runEmbeddedStoppable(t, embedded.ServerConfig{DataDir: dir})
		key := checkpoint.Key{Session: "plain"}
		convs := saveMarkedVersions(t, clientURLOf(s), key, 3, "x")
		stop()
		before := dirDigest(t, dir)

		_, err := embedded.StartServer(embedded.ServerConfig{DataDir: dir, Listen: "127.0.0.1:0", Encryption: embedded.StoreEncryption{Key: storeKeyA}})
		require.ErrorIs(t, err, embedded.ErrStoreNotEncrypted)
		require.Equal(t, before, dirDigest(t, dir), "the data directory changed")

		s, _ = runEmbeddedStoppable(t, embedded.ServerConfig{DataDir: dir})
		requireEveryVersion(t, clientURLOf(s), key, convs)
	})
}

// The attack: decode the files of the data directory and look for a saved secret. With
// JetStream encryption on, no file, raw or zstd-decoded, holds it; without, the same search finds it
// (so the search itself works).
func TestStoreEncryption_NoSavedBytesInTheDataDirectory(t *testing.T) {
	for _, tc := range []struct {
		name      string
		enc       embedded.StoreEncryption
		wantFound bool
	}{
		{"plain", embedded.StoreEncryption{}, true},
		{"encrypted", embedded.StoreEncryption{Key: storeKeyA}, false},
		{"encrypted aes", embedded.StoreEncryption{Key: storeKeyA, Cipher: server.AES}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			marker := fmt.Sprintf("secret-marker-%d", time.Now().UnixNano())
			s, stop := runEmbeddedStoppable(t, embedded.ServerConfig{DataDir: dir, Encryption: tc.enc})
			saveMarkedVersions(t, clientURLOf(s), checkpoint.Key{Session: "grep"}, 3, marker)
			saveLargeValue(t, clientURLOf(s), marker)
			stop()
			found := testenv.GrepDataDir(t, dir, marker)
			if tc.wantFound {
				require.NotEmpty(t, found, "the search must find the marker in a plain store, or it proves nothing")
			} else {
				require.Empty(t, found, "saved bytes readable in the data directory")
			}
		})
	}
}

// saveLargeValue saves a conversation holding a string large enough to be stored as a value (§2
// of docs/format.md), with the marker inside it.
func saveLargeValue(t *testing.T, url, marker string) {
	t.Helper()
	c, err := checkpoint.Connect(url, nil)
	require.NoError(t, err)
	defer c.Close()
	big := strings.Repeat("tool output ", 4000) + marker
	conv := []byte(`[{"role":"user","content":"` + big + `"}]`)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = c.Save(ctx, checkpoint.Key{Session: "value"}, conv)
	require.NoError(t, err)
}
