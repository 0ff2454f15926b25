package service

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/wire"
)

// The record header of the longest record there can be (every free text at its longest, of the
// characters that take the most escaped) is within wire.MaxVersionHeaderBytes and under the 24 KiB
// the protocol says, is ASCII, and decodes to the record.
func TestVersionHeader_LongestRecordIsBounded(t *testing.T) {
	for _, worst := range []string{"\x7f", "\x01", "\U0001F600", "\u00e9"} {
		id := strings.Repeat(worst, wire.MaxIDBytes/len(worst))
		text := strings.Repeat(worst, wire.MaxTextHeaderBytes/len(worst))
		key := wire.Key{Namespace: id, Session: id, Agent: id}
		at := time.Date(2026, 11, 24, 2, 10, 59, 123456789, time.UTC)
		big := int64(math.MaxInt64)
		v := wire.Version{Format: wire.VersionFormat, Key: key, Version: wire.MaxVersion, Parent: wire.MaxVersion - 1,
			Hash: wire.Hash([]byte("[]")), SaveID: id, Writer: text, Reason: wire.ReasonMigrate, Created: at,
			RawBytes: big, StoredBytes: big, Gen: math.MaxUint64, Dialect: "openai-responses",
			Counts: wire.Counts{Messages: int(big), User: int(big), Assistant: int(big), ToolResult: int(big), Extension: int(big), ToolCalls: int(big), System: int(big)},
			ForkOf: &wire.ForkRef{Key: key, Version: wire.MaxVersion},
			Origin: &wire.Origin{Via: wire.ReasonMigrate, Source: text, At: at},
		}
		h := versionHeader(v, 1<<20)
		t.Logf("%q: %d bytes", worst, len(h))
		require.NotEmpty(t, h)
		require.LessOrEqual(t, len(h), 24<<10)
		require.LessOrEqual(t, len(h), wire.MaxVersionHeaderBytes)
		for i := range len(h) {
			require.True(t, h[i] >= 0x20 && h[i] < 0x7f, "byte %d is %#x", i, h[i])
		}
		var got wire.Version
		require.NoError(t, json.Unmarshal([]byte(h), &got))
		require.Equal(t, v, got)
		require.Empty(t, versionHeader(v, int64(len(h))), "a header longer than half a reply is left out")
	}
}

// asciiJSON writes the same JSON value as json.Marshal, for every kind of character.
func TestASCIIJSON_SameValue(t *testing.T) {
	for _, s := range []string{"", "plain", "é", "\u2028\u2029", "\x00\x1f\x7f", "\U0001F600\U00010000\U0010FFFF", "\uFFFD\uFFFF", "<&>\"\\/", "a\xffb"} {
		j, err := json.Marshal(map[string]string{s: s})
		require.NoError(t, err)
		var got map[string]string
		require.NoError(t, json.Unmarshal([]byte(asciiJSON(j)), &got), "%q", s)
		var want map[string]string
		require.NoError(t, json.Unmarshal(j, &want))
		require.Equal(t, want, got, "%q", s)
	}
}

// recordHeaders gives each record its own header, as versionHeader builds it: records that differ
// in any field (here the save id, or the room) do not share one, and it holds a bounded number.
func TestRecordHeaders_EachRecordItsOwn(t *testing.T) {
	var h recordHeaders
	v := wire.Version{Format: wire.VersionFormat, Key: wire.Key{Namespace: "ns", Session: "s", Agent: "main"}, Version: 2,
		Hash: "sha256:00", SaveID: "first", Created: time.Now(), RawBytes: 10}
	other := v
	other.SaveID = "second" // a session deleted and saved again: same number and hash
	for range 2 {
		require.Equal(t, versionHeader(v, 1<<20), h.of(v, 1<<20))
		require.Equal(t, versionHeader(other, 1<<20), h.of(other, 1<<20))
		require.Equal(t, "", h.of(v, 100), "no room for it")
	}
	require.NotEqual(t, h.of(v, 1<<20), h.of(other, 1<<20))
	for i := range maxRecordHeaders + 10 {
		v.Version = uint64(i + 3)
		require.Equal(t, versionHeader(v, 1<<20), h.of(v, 1<<20))
	}
	require.LessOrEqual(t, len(h.m), maxRecordHeaders)
}
