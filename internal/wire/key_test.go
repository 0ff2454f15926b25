package wire

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestEncodeID_RoundTripAndSafety(t *testing.T) {
	for _, id := range []string{
		"default", "user@example.com/a.b*c >d", ".", "..", "*", ">", "a b\tc\nd", "=", "=41", "==",
		"ünïcödé", "会话", "🙂", "$JS.API.>", "_INBOX.x", "-", "_", strings.Repeat("é", 128),
	} {
		tok := EncodeID(id)
		require.NotContains(t, tok, ".", id)
		require.NotContains(t, tok, "*", id)
		require.NotContains(t, tok, ">", id)
		require.False(t, strings.ContainsAny(tok, " \t\r\n"), id)
		for _, c := range []byte(tok) {
			require.True(t, isPlain(c) || c == '=' || c >= 'A' && c <= 'F', "%q has %q", tok, c)
		}
		got, err := DecodeID(tok)
		require.NoError(t, err, id)
		require.Equal(t, id, got)
	}
	require.Equal(t, "user=40example=2Ecom=2Fa=2Eb=2Ac=20=3Ed", EncodeID("user@example.com/a.b*c >d"))
}

func TestDecodeID_RefusesNonCanonicalTokens(t *testing.T) {
	for _, tok := range []string{
		"", "a.b", "a*", "=4", "=", "=2e", "=41", "=ZZ", "a b", "=FF=FE", // =FF=FE decodes to invalid UTF-8
	} {
		_, err := DecodeID(tok)
		require.ErrorIs(t, err, ErrInvalidID, "%q", tok)
	}
}

func TestKey_TokenRoundTrip(t *testing.T) {
	k := Key{Namespace: "a.b", Session: "c d", Agent: "e>f"}
	got, err := ParseToken(k.Token())
	require.NoError(t, err)
	require.Equal(t, k, got)
	require.Equal(t, 3, strings.Count(IngestSubject(k), ".")-1, "exactly three key tokens after cp.ingest")
	_, err = ParseToken("a.b")
	require.ErrorIs(t, err, ErrInvalidID)
}

func TestValidateID(t *testing.T) {
	require.NoError(t, ValidateID("x"))
	require.ErrorIs(t, ValidateID(""), ErrInvalidID)
	require.ErrorIs(t, ValidateID(strings.Repeat("x", MaxIDBytes+1)), ErrInvalidID)
	require.ErrorIs(t, ValidateID("\xff"), ErrInvalidID)
	require.NoError(t, ValidateID(strings.Repeat("x", MaxIDBytes)))
	require.ErrorContains(t, Key{Namespace: "n", Session: "", Agent: "a"}.Validate(), "session")
}

func FuzzEncodeID(f *testing.F) {
	for _, s := range []string{"a", "a.b", "=", "ü", ">"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if ValidateID(id) != nil || !utf8.ValidString(id) {
			return
		}
		tok := EncodeID(id)
		got, err := DecodeID(tok)
		if err != nil || got != id {
			t.Fatalf("%q → %q → %q, %v", id, tok, got, err)
		}
		if strings.ContainsAny(tok, ".*> \t\r\n") {
			t.Fatalf("unsafe token %q", tok)
		}
	})
}

// The wildcards made from the subject prefixes are the subjects docs/protocol.md §3 names (the
// streams' subjects, the daemon's subscriptions, the tenants' grants): nothing is written by hand
// outside this package.
func TestSubjectWildcards(t *testing.T) {
	for got, want := range map[string]string{
		EverySubject(IngestSubjectPrefix):                       "cp.ingest.>",
		EverySubject(ChunkSubjectPrefix):                        "cp.chunk.>",
		EverySubject(ResultSubjectPrefix):                       "cp.result.>",
		EverySubject(SavedSubjectPrefix):                        "cp.saved.>",
		EverySubject(SaveSubjectPrefix):                         "cp.save.>",
		EverySubject(APISubjectPrefix):                          "cp.api.>",
		EverySubject(AdminSubjectPrefix):                        "cp.admin.>",
		EverySubject(ResultDirectGetPrefix):                     "$JS.API.DIRECT.GET.CP_RESULTS.>",
		NamespaceSubjects(IngestSubjectPrefix, EncodeID("a.b")): "cp.ingest." + EncodeID("a.b") + ".>",
		NamespaceSubjects(APISubjectPrefix, "default"):          "cp.api.default.>",
		APIOpSubjects(OpList):                                   "cp.api.*.list",
		AdminListSubject:                                        "cp.admin.list",
	} {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
}
