package sealing_test

// Tests written by the session-17 review (s17-review1). Each one FAILS on the code it was written
// against and states the finding it proves; the lead merges it with the fix.

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/sealing"
)

// A keys file is read into a Go map (ParseKeys): a namespace named twice keeps only its last key,
// and anything after the first JSON value is never read. An operator who rotates alice's key by
// adding a second "alice" line (instead of putting both in one array) starts a daemon that no
// longer holds the key alice's data is sealed with: nothing says so at start (the reload's
// "dropped keys" warning does not run then), and every read of alice's sessions fails with
// "corrupt". Both files must be refused, naming the member.
func TestParseKeys_RefusesWhatItWouldDrop(t *testing.T) {
	k1, k2 := newKey(), newKey()
	for _, tc := range []struct{ name, file, want string }{
		{"a namespace named twice", `{"alice": "` + k1 + `", "alice": "` + k2 + `"}`, `"alice"`},
		{"a second JSON value after the object", `{"alice": "` + k1 + `"} {"bob": "` + k2 + `"}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ks, err := sealing.ParseKeys([]byte(tc.file))
			require.Error(t, err, "parsed %d keys; alice seals: %v, bob seals: %v", ks.Count(), ks.Seals("alice"), ks.Seals("bob"))
			require.ErrorContains(t, err, tc.want, "the error names the member")
			require.NotContains(t, err.Error(), k1)
			require.NotContains(t, err.Error(), k2)
		})
	}
}
