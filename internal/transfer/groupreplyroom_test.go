package transfer_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// A group whose reply could not fit one message (64 results, each echoing a 1,000-byte writer, on
// a server whose max_payload is 64 KiB) is still answered: the saves whose results fit are stored
// and answered, the rest are answered busy, not stored, and go through when sent again. Found by
// the review of group commit: the daemon stored all 64, then its reply was refused by the server
// and the writer heard nothing.
func TestSaveGroup_ReplyLargerThanAMessageIsNotSent(t *testing.T) {
	env := testenv.StartWithMaxPayload(t, 64<<10)
	nc := env.Conn()
	key := wire.Key{Session: "reply"}.WithDefaults()
	items := func(from, to int) []groupItem {
		var out []groupItem
		for i := from; i < to; i++ {
			out = append(out, appendItem(fmt.Sprintf("save-%02d-1b9d6bcd-bbfd-4b2d-9b5d-ab8dfbbd4bed", i), uint64(i), oneMessage("u", i)))
		}
		return out
	}
	hdr := func(n int) map[string]string {
		return map[string]string{wire.HdrGroup: strconv.Itoa(n), wire.HdrWriter: strings.Repeat("w", 1000)}
	}
	sent := items(0, 64)
	rep := requestGroup(t, nc, wire.SaveSubject(key), hdr(len(sent)), groupBody(sent...))
	require.Nil(t, rep.Error)
	require.Len(t, rep.Results, 64)
	stored := 0
	for i, res := range rep.Results {
		if res.Error != nil {
			require.Equal(t, wire.CodeBusy, res.Error.Code, "save %d: %s", i, res.Error.Message)
			require.Contains(t, res.Error.Message, "max_payload")
			continue
		}
		require.Equal(t, i, stored, "the stored saves come first")
		require.Equal(t, uint64(i+1), res.Version.Version)
		stored++
	}
	require.Greater(t, stored, 0)
	require.Less(t, stored, 64)
	for stored < 64 { // the writer sends the rest again, as the SDK does
		rest := items(stored, 64)
		rep = requestGroup(t, nc, wire.SaveSubject(key), hdr(len(rest)), groupBody(rest...))
		require.Nil(t, rep.Error)
		n := 0
		for _, res := range rep.Results {
			if res.Error == nil {
				n++
			}
		}
		require.Greater(t, n, 0)
		stored += n
	}
	got, err := env.Client.Get(ctxT(t), checkpoint.Key{Session: key.Session}, 0)
	require.NoError(t, err)
	require.Equal(t, uint64(64), got.Version)
}
