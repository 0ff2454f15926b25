package sealing_test

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/sealing"
)

// newKey returns a fresh base64 AES-256 key, as `openssl rand -base64 32` makes.
func newKey() string {
	k := make([]byte, 32)
	_, _ = rand.Read(k)
	return base64.StdEncoding.EncodeToString(k)
}

// keysOf parses a keys file made of members.
func keysOf(t testing.TB, members map[string]any) *sealing.Keys {
	t.Helper()
	data, err := json.Marshal(members)
	require.NoError(t, err)
	ks, err := sealing.ParseKeys(data)
	require.NoError(t, err)
	return ks
}

func TestParseKeys_RefusesBadFilesNamingTheMember(t *testing.T) {
	good := newKey()
	short := base64.StdEncoding.EncodeToString([]byte("sixteen byte key"))
	for _, tc := range []struct{ file, want string }{
		{`not json`, "not a JSON object"},
		{`["a"]`, "not a JSON object"},
		{`{}`, "no keys"},
		{`{"alice": 3}`, `namespace "alice": want a base64 key`},
		{`{"alice": []}`, `namespace "alice": want a base64 key`},
		{`{"alice": "` + short + `"}`, `namespace "alice": key 0: 16 bytes, AES-256 needs 32`},
		{`{"alice": ["` + good + `", "%%%"]}`, `namespace "alice": key 1: not standard base64`},
		{`{"": "` + good + `"}`, `namespace "": invalid id`},
	} {
		_, err := sealing.ParseKeys([]byte(tc.file))
		require.ErrorContains(t, err, tc.want, tc.file)
		require.NotContains(t, err.Error(), good, "an error shows a key")
	}
	ks, err := sealing.ParseKeys([]byte(`{"alice": ["` + good + `", "` + newKey() + `"], "*": "` + good + `"}`))
	require.NoError(t, err)
	require.Equal(t, 2, ks.Count(), "a key named twice is one key")
	require.True(t, ks.Seals("alice"))
	require.True(t, ks.Seals("anyone"), `"*" seals every namespace not listed`)

	only := keysOf(t, map[string]any{"alice": good})
	require.False(t, only.Seals("bob"), "no key and no \"*\": stored plain")
	var none *sealing.Keys
	require.False(t, none.Seals("alice"))
	require.Zero(t, none.Count())
}

func TestReadKeysFile_NamesTheFileNeverTheKey(t *testing.T) {
	dir := t.TempDir()
	_, err := sealing.ReadKeysFile(filepath.Join(dir, "missing.json"))
	require.ErrorContains(t, err, "--namespace-keys: ")
	require.ErrorContains(t, err, "missing.json")

	secret := newKey()
	bad := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"alice": "`+secret[:20]+`"}`), 0o600))
	_, err = sealing.ReadKeysFile(bad)
	require.ErrorContains(t, err, "--namespace-keys "+bad+`: namespace "alice"`)
	require.NotContains(t, err.Error(), secret[:20])

	good := filepath.Join(dir, "good.json")
	require.NoError(t, os.WriteFile(good, []byte(`{"*": ["`+newKey()+`", "`+newKey()+`"]}`), 0o600))
	ks, err := sealing.ReadKeysFile(good)
	require.NoError(t, err)
	require.Equal(t, 2, ks.Count())
}

// A reload may add and drop keys (the dropped ones are reported by id, sorted), but not turn
// sealing on or off.
func TestCheckReload(t *testing.T) {
	k1, k2, k3 := newKey(), newKey(), newKey()
	old := keysOf(t, map[string]any{"a": []string{k1, k2}, "*": k3})
	next := keysOf(t, map[string]any{"a": k2, "*": newKey()})
	dropped, err := sealing.CheckReload(old, next)
	require.NoError(t, err)
	require.Len(t, dropped, 2, "k1 and k3")
	require.Equal(t, old.Dropped(next), dropped)
	require.True(t, dropped[0] < dropped[1], "sorted")
	for _, id := range dropped {
		require.Len(t, id, 16, "an 8-byte key id in hex")
	}
	dropped, err = sealing.CheckReload(old, old)
	require.NoError(t, err)
	require.Empty(t, dropped)

	_, err = sealing.CheckReload(nil, old)
	require.ErrorContains(t, err, "restart checkpointd to turn encryption on")
	_, err = sealing.CheckReload(old, nil)
	require.ErrorContains(t, err, "restart checkpointd to turn encryption off")
	dropped, err = sealing.CheckReload(nil, nil)
	require.NoError(t, err)
	require.Empty(t, dropped)
}
