package transfer_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/checkpointd/checkpointd/internal/testenv"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// Refused requests, raw, a few at once: each gets its typed error reply, with the service error
// headers. The replies are sent by the workers the requests run on, after the micro endpoint's
// handler returned; they once wrote micro's request object while micro read it (the reply's
// error, for micro's stats) as the handler returned: a data race that `go test -race` reported
// in this test.
func TestService_ErrorRepliesFromWorkers(t *testing.T) {
	env := testenv.Start(t)
	nc := env.Conn()
	const senders, each = 8, 128 // more at once would be refused busy (429), before any worker
	var wg sync.WaitGroup
	errs := make(chan error, senders*each)
	for s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := s * each; i < (s+1)*each; i++ {
				errs <- refusedAsBadRequest(nc, i)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// refusedAsBadRequest sends history request i with a body the service refuses (bad_request), and
// says how its reply differs from that typed error.
func refusedAsBadRequest(nc *nats.Conn, i int) error {
	body := fmt.Appendf(nil, `{"session": %d}`, i) // not a string
	msg, err := nc.Request("cp.api.replies.history", body, 20*time.Second)
	if err != nil {
		return fmt.Errorf("request %d: %w", i, err)
	}
	var we wire.Error
	switch {
	case msg.Header.Get(wire.HdrServiceErrorCode) != wire.StatusCode(wire.CodeBadRequest):
		return fmt.Errorf("request %d: error code header %q, body %q", i, msg.Header.Get(wire.HdrServiceErrorCode), msg.Data)
	case msg.Header.Get(wire.HdrServiceError) == "":
		return fmt.Errorf("request %d: no error description header", i)
	case json.Unmarshal(msg.Data, &we) != nil || we.Code != wire.CodeBadRequest:
		return fmt.Errorf("request %d: body %q", i, msg.Data)
	}
	return nil
}
