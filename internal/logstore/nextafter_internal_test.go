package logstore

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/engine"
)

// The body Log.Moved builds by hand is the one encoding/json writes for the same get.
func TestNextAfter_SameAsEncodingJSON(t *testing.T) {
	keys := []engine.Key{
		{Namespace: "default", Session: "s", Agent: "main"},
		{Namespace: "user@example.com", Session: "a.b*c >d\"\\é", Agent: "agent/1"},
	}
	for _, k := range keys {
		subject, err := logSubject(k)
		require.NoError(t, err)
		for _, seq := range []uint64{0, 1, 41, 1<<64 - 2} {
			want, err := json.Marshal(getRequest{Seq: seq + 1, NextFor: subject})
			require.NoError(t, err)
			require.Equal(t, string(want), string(nextAfter(seq, subject)))
		}
	}
}
