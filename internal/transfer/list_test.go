package transfer_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/checkpoint"
	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/wire"
)

func keysOf(list []checkpoint.Session) []string {
	out := make([]string, len(list))
	for i, s := range list {
		out[i] = fmt.Sprintf("%s/%s/%s@%d", s.Key.Namespace, s.Key.Session, s.Key.Agent, s.Version.Version)
	}
	return out
}

// Listings read each session's head from CP_LOG: every change acknowledged before a listing shows in
// it at once (read-your-writes), per namespace or across all of them (in key order as the SDK sorts
// them; the daemon pages them in creation order).
func TestDaemon_ListFollowsEveryChange(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	c := env.Client
	for _, k := range []checkpoint.Key{{Namespace: "b", Session: "s2"}, {Namespace: "a", Session: "s1", Agent: "z"},
		{Namespace: "a", Session: "s1"}, {Namespace: "a", Session: "s0"}, {Namespace: "b", Session: "s1"}} {
		_, err := c.Save(ctx, k, []byte(`[]`))
		require.NoError(t, err)
	}
	list, err := c.List(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, []string{"a/s0/main@1", "a/s1/main@1", "a/s1/z@1"}, keysOf(list))
	all, err := c.ListAll(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"a/s0/main@1", "a/s1/main@1", "a/s1/z@1", "b/s1/main@1", "b/s2/main@1"}, keysOf(all))

	// A new version, a deletion and a lease without a version, each listed as soon as acknowledged.
	_, err = c.Save(ctx, checkpoint.Key{Namespace: "a", Session: "s0"}, []byte(`[{"role":"user","content":[{"type":"text","text":"x"}]}]`))
	require.NoError(t, err)
	_, err = c.Delete(ctx, checkpoint.Key{Namespace: "a", Session: "s1", Agent: "z"}, nil)
	require.NoError(t, err)
	_, err = c.Acquire(ctx, checkpoint.Key{Namespace: "a", Session: "leased-only"}, checkpoint.WithTTL(time.Minute))
	require.NoError(t, err)
	list, err = c.List(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, []string{"a/s0/main@2", "a/s1/main@1"}, keysOf(list))

	// A session's agents, as RestoreMerged asks for them; an offset (the protocol before cursors) is
	// refused, naming cursor.
	merged, agents, err := c.RestoreMerged(ctx, "b", "s1", false)
	require.NoError(t, err)
	require.Equal(t, "[]", string(merged))
	require.Equal(t, map[string]uint64{"main": 1}, agents)
	m, err := env.Conn().Request(wire.APISubject("a", wire.OpList), []byte(`{"offset":99}`), 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, "400", m.Header.Get(wire.HdrServiceErrorCode), "%s", m.Data)
	require.Contains(t, string(m.Data), "cursor")
}

// listPages pages a listing by raw requests on subject from req, and returns the keys of each page
// ("ns/session/agent"), checking that every page but the last says more and gives a new cursor.
func listPages(t *testing.T, nc *nats.Conn, subject string, req wire.ListRequest) [][]string {
	t.Helper()
	var pages [][]string
	for {
		require.Less(t, len(pages), 1000, "the cursor moves on")
		body, err := json.Marshal(req)
		require.NoError(t, err)
		m, err := nc.Request(subject, body, 5*time.Second)
		require.NoError(t, err)
		require.Empty(t, m.Header.Get(wire.HdrServiceErrorCode), "%s", m.Data)
		var rep wire.ListReply
		require.NoError(t, json.Unmarshal(m.Data, &rep))
		var keys []string
		for _, h := range rep.Sessions {
			keys = append(keys, h.Key.Namespace+"/"+h.Key.Session+"/"+h.Key.Agent)
		}
		pages = append(pages, keys)
		if !rep.More {
			require.Empty(t, rep.Cursor)
			return pages
		}
		require.NotEmpty(t, rep.Cursor)
		require.NotEqual(t, req.Cursor, rep.Cursor)
		req.Cursor = rep.Cursor
	}
}

// A list request's limit is the page size: every page but the last holds exactly limit sessions,
// and the pages together hold every session once, in the order they were created, whatever the
// limit (1, a few, around the engine's index page of 64, the most allowed) and across the
// namespaces of the admin listing. Sessions the index holds but a listing leaves out (leased before
// any version, deleted) do not shorten a page; the reply's size still bounds a page whose limit
// does not fit in one message. The SDK's ListPage and ListAllPage page the same way.
func TestDaemon_ListLimitPagesExactly(t *testing.T) {
	env := testenv.StartWithMaxPayload(t, 64<<10)
	ctx := ctxT(t)
	c := env.Client
	var want []string    // the "pages" namespace, in creation order
	for i := range 151 { // 150 listed: pages of 5 and 75 end where the listing does
		k := checkpoint.Key{Namespace: "pages", Session: fmt.Sprintf("s%03d", i)}
		switch i {
		case 40: // leased before any version: in the index, not listed
			_, err := c.Acquire(ctx, k, checkpoint.WithTTL(time.Minute))
			require.NoError(t, err)
			continue
		case 41: // deleted: left out
			_, err := c.Save(ctx, k, []byte(`[]`))
			require.NoError(t, err)
			_, err = c.Delete(ctx, k, nil)
			require.NoError(t, err)
			continue
		}
		_, err := c.Save(ctx, k, []byte(`[]`))
		require.NoError(t, err)
		want = append(want, "pages/"+k.Session+"/main")
		if i == 70 { // a second agent of one session
			_, err = c.Save(ctx, checkpoint.Key{Namespace: "pages", Session: k.Session, Agent: "helper"}, []byte(`[]`))
			require.NoError(t, err)
			want = append(want, "pages/"+k.Session+"/helper")
		}
	}
	var wantAll []string // the admin listing: namespace after namespace, sorted
	for _, k := range []checkpoint.Key{{Namespace: "adm-a", Session: "x"}, {Namespace: "adm-a", Session: "y"}, {Namespace: "adm-a", Session: "z"},
		{Namespace: "adm-b", Session: "x"}, {Namespace: "adm-b", Session: "y"}} {
		_, err := c.Save(ctx, k, []byte(`[]`))
		require.NoError(t, err)
		wantAll = append(wantAll, k.Namespace+"/"+k.Session+"/main")
	}
	wantAll = append(wantAll, want...)

	nc := env.Conn()
	for _, limit := range []int{1, 2, 3, 5, 8, 63, 64, 65, 75, 100} { // at most the 136 heads 64 KiB holds
		t.Run(fmt.Sprintf("limit %d", limit), func(t *testing.T) {
			for _, l := range []struct {
				subject string
				want    []string
			}{{wire.APISubject("pages", wire.OpList), want}, {wire.AdminListSubject, wantAll}} {
				pages := listPages(t, nc, l.subject, wire.ListRequest{Limit: limit})
				for i, p := range pages[:len(pages)-1] {
					require.Len(t, p, limit, "%s: page %d of %d", l.subject, i, len(pages))
				}
				require.LessOrEqual(t, len(pages[len(pages)-1]), limit)
				require.NotEmpty(t, pages[len(pages)-1], "%s: no more once the last session is sent", l.subject)
				require.Equal(t, l.want, slices.Concat(pages...), "%s: every session once, in creation order", l.subject)
			}
		})
	}

	// The SDK's pages are the daemon's.
	t.Run("SDK", func(t *testing.T) {
		sdkPages := func(page func(cursor string) (checkpoint.SessionPage, error)) (pages [][]string) {
			cursor := ""
			for {
				require.Less(t, len(pages), 1000, "the cursor moves on")
				p, err := page(cursor)
				require.NoError(t, err)
				pages = append(pages, nil)
				for _, h := range p.Sessions {
					pages[len(pages)-1] = append(pages[len(pages)-1], h.Key.Namespace+"/"+h.Key.Session+"/"+h.Key.Agent)
				}
				if p.Next == "" {
					return pages
				}
				cursor = p.Next
			}
		}
		pages := sdkPages(func(cursor string) (checkpoint.SessionPage, error) { return c.ListPage(ctx, "pages", cursor, 40) })
		require.Equal(t, [][]string{want[:40], want[40:80], want[80:120], want[120:]}, pages)
		pages = sdkPages(func(cursor string) (checkpoint.SessionPage, error) { return c.ListAllPage(ctx, cursor, 50) })
		require.Equal(t, [][]string{wantAll[:50], wantAll[50:100], wantAll[100:150], wantAll[150:]}, pages)
		for _, limit := range []int{-1, wire.MaxListLimit + 1} {
			_, err := c.ListPage(ctx, "pages", "", limit)
			require.ErrorIs(t, err, checkpoint.ErrBadRequest, "limit %d", limit)
			require.ErrorContains(t, err, "limit")
		}
	})

	// One session's agents, a page of one at a time.
	pages := listPages(t, nc, wire.APISubject("pages", wire.OpList), wire.ListRequest{Session: "s070", Limit: 1})
	require.Equal(t, []string{"pages/s070/main", "pages/s070/helper"}, slices.Concat(pages...))

	// A limit larger than a reply holds: the reply's size bounds the page (64 KiB here).
	pages = listPages(t, nc, wire.APISubject("pages", wire.OpList), wire.ListRequest{Limit: wire.MaxListLimit})
	require.Greater(t, len(pages), 1, "150 heads do not fit in 64 KiB")
	require.Less(t, len(pages[0]), 150)
	require.Equal(t, want, slices.Concat(pages...))
}

// A hostile limit, sent as raw NATS requests, is refused bad_request naming the field, on the
// namespace's subject and the admin one; the daemon keeps serving.
func TestDaemon_ListLimitRefusesWhatIsOutOfRange(t *testing.T) {
	env := testenv.Start(t)
	ctx := ctxT(t)
	for _, s := range []string{"a", "b", "c"} {
		_, err := env.Client.Save(ctx, checkpoint.Key{Namespace: "ns", Session: s}, []byte(`[]`))
		require.NoError(t, err)
	}
	nc := env.Conn()
	for _, body := range []string{`{"limit":-1}`, `{"limit":-9007199254740993}`, `{"limit":10001}`, `{"limit":9007199254740992}`,
		`{"limit":18446744073709551616}`, `{"limit":1e30}`, `{"limit":"10"}`, `{"limit":1.5}`, `{"limit":2.0}`, `{"limit":true}`, `{"limit":[1]}`} {
		for _, subject := range []string{wire.APISubject("ns", wire.OpList), wire.AdminListSubject} {
			m, err := nc.Request(subject, []byte(body), 5*time.Second)
			require.NoError(t, err)
			require.Equal(t, "400", m.Header.Get(wire.HdrServiceErrorCode), "%s %s: %s", subject, body, m.Data)
			var e wire.Error
			require.NoError(t, json.Unmarshal(m.Data, &e), "%s", m.Data)
			require.Equal(t, wire.CodeBadRequest, e.Code, "%s %s", subject, body)
			require.Contains(t, e.Message, "limit", "%s %s: the error names the field", subject, body)
		}
	}
	// Still serving, and the edges of the range are served.
	for limit, n := range map[int]int{0: 3, 1: 1, wire.MaxListLimit: 3} {
		pages := listPages(t, nc, wire.APISubject("ns", wire.OpList), wire.ListRequest{Limit: limit})
		require.Len(t, pages[0], n, "limit %d", limit)
		require.Equal(t, []string{"ns/a/main", "ns/b/main", "ns/c/main"}, slices.Concat(pages...))
	}
}
