package checkpoint_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// A save's result is believed only when it is the outcome of what was sent, or when the daemon
// confirms the version it names was made by this save id (issue 10, item 5).
func TestCheckResult(t *testing.T) {
	env := testenv.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := checkpoint.Key{Session: "checked"}.WithDefaults()
	first := []byte(`[{"role":"user","content":"first"}]`)
	v1, err := env.Client.Save(ctx, key, first, checkpoint.WithSaveID("first"))
	require.NoError(t, err)

	mine := []byte(`[{"role":"user","content":"first"},{"role":"user","content":"mine"}]`)
	sent := wire.Hash(mine)
	ok := func(saveID string, version uint64, received string) wire.SaveResult {
		return wire.SaveResult{SaveID: saveID, Key: key, OK: true, Version: &wire.Version{Key: key, Version: version}, Received: received}
	}
	refused := wire.SaveResult{SaveID: "mine", Key: key, Error: &wire.Error{Code: wire.CodeConflict, Message: "no"}}
	refusedOther := refused
	refusedOther.Received = wire.Hash(first)
	refusedMine := refused
	refusedMine.Received = sent

	cases := []struct {
		name    string
		saveID  string
		res     wire.SaveResult
		want    uint64 // the version believed, or 0
		wantErr error
	}{
		{"what was sent", "mine", ok("mine", 7, sent), 7, nil},
		{"other bytes, a version another save made", "mine", ok("mine", v1.Version, wire.Hash(first)), 0, checkpoint.ErrCorrupt},
		{"nothing said of the bytes", "mine", ok("mine", v1.Version, ""), 0, checkpoint.ErrCorrupt},
		{"a version that does not exist", "mine", ok("mine", 9, ""), 0, checkpoint.ErrCorrupt},
		{"another save id", "mine", ok("other", 7, sent), 0, checkpoint.ErrCorrupt},
		{"an earlier attempt of the same save, sent another way", "first", ok("first", v1.Version, wire.Hash([]byte("[]"))), v1.Version, nil},
		{"a refusal of other bytes", "mine", refusedOther, 0, checkpoint.ErrCorrupt},
		{"a refusal of these bytes", "mine", refusedMine, 0, checkpoint.ErrConflict},
		{"a refusal from the headers alone", "mine", refused, 0, checkpoint.ErrConflict},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			data, err := json.Marshal(tc.res)
			require.NoError(t, err)
			v, _, err := checkpoint.CheckResult(env.Client, ctx, data, key, tc.saveID, sent)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, v.Version)
		})
	}
}
