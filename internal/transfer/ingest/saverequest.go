package ingest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/checkpointd/checkpointd/internal/transfer/admission"
	"github.com/checkpointd/checkpointd/internal/transfer/edge"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// Saves as requests (docs/protocol.md §4.0).
//
// A client sends a save as a core NATS request on cp.save.<key token>, with the headers and body
// of a save on the ingest stream. A daemon of the queue group takes it, settles it with the same
// code as a save taken off CP_INGEST (ingester.settle), and answers once the save is durable: the
// reply is the save's result. The ingest stream stays as the fallback for when no daemon answers
// ("no responders"): a save is still durable while no daemon runs. The request path skips the
// stream's hops (PubAck, delivery, ack, result), which cost more than the save itself (§8.15a of
// docs/format.md).
//
// Every request that names a reply subject gets exactly one reply: the result, or a refusal
// (busy, unavailable while shutting down, bad_request for a subject or save id it cannot use). A
// request without a reply subject is not acted on: nobody could learn its outcome, so it would be
// a save without an acknowledgement. It is counted as saves_total{path="request",
// result="bad_request"} and logged at debug level.
//
// The subscription's callback never waits (a callback that blocks makes the server cut the
// daemon's connection as a slow consumer): a request is admitted, or refused busy, at once, and
// settled on a goroutine of its own. Admission bounds the requests in progress and the bytes of
// their bodies (the ingest budget's size, --ingest-memory); settling them then reserves every
// buffer in the ingest budget, as for a save off the stream. Requests the callback has not taken
// yet wait in nats.go's buffer of the subscription (64 MiB by default); should it overflow, nats.go
// drops them and reports a slow consumer (nats_events_total{event="slow_consumer"}), and their
// writers, getting no reply in time, send them again.

// saveRequestsQueue is the queue group of the save subscription: the service's, so several daemons
// share the requests.
const saveRequestsQueue = wire.ServiceName

// maxSaveRequests bounds the save requests one daemon settles at once; beyond it a request is
// refused busy at once.
const maxSaveRequests = 256

// saveRequestTimeout bounds the settling of one request, as for a save off the stream.
const saveRequestTimeout = 30 * time.Second

// maxHeaderBytes bounds the headers of a save request, as JetStream bounds those of a message on
// the ingest stream (its limit, 64 KiB).
const maxHeaderBytes = 64 << 10

// headerBytes is about what h takes on the wire.
func headerBytes(h nats.Header) int {
	n := 0
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(v) + 4 // ": " and CRLF
		}
	}
	return n
}

// SaveRequests answers the saves sent as requests.
type SaveRequests struct {
	in      *Ingester
	nc      *nats.Conn
	adm     *admission.Controller // requests in progress and the bytes of their bodies; never waits
	sub     *nats.Subscription
	workers *admission.Workers // the goroutines that settle them
}

// NewSaveRequests answers saves with in's settling; the requests in progress may hold budget bytes
// of bodies (the ingest budget's size), however many there are.
func NewSaveRequests(in *Ingester, nc *nats.Conn, budget int64) *SaveRequests {
	// The gauge is not registered: what the saves hold shows in the ingest budget's figures.
	adm := admission.NewForSaves(budget, prometheus.NewGauge(prometheus.GaugeOpts{Name: "save_request_bytes"}), maxSaveRequests)
	return &SaveRequests{in: in, nc: nc, adm: adm, workers: admission.NewWorkers()}
}

// PeakBytes is the most the save requests in progress ever held at once (their bodies and
// headers, as admitted).
func (sr *SaveRequests) PeakBytes() int64 { return sr.adm.Peak() }

// Start subscribes to every namespace's save subject in the service's queue group.
func (sr *SaveRequests) Start() error {
	sub, err := sr.nc.QueueSubscribe(wire.SaveSubjectPrefix+">", saveRequestsQueue, sr.handle)
	if err != nil {
		return fmt.Errorf("save requests: %w", err)
	}
	sr.sub = sub
	return nil
}

// Stop takes no new requests, answers the ones already received (those queued in the
// subscription too), and waits for them. If ctx ends first, the saves still settling Stop waiting
// on storage and answer unavailable; the writers retry them, with the same save id.
func (sr *SaveRequests) Stop(ctx context.Context) {
	if sr.sub == nil {
		return
	}
	closed := sr.sub.StatusChanged(nats.SubscriptionClosed)
	if err := sr.sub.Drain(); err == nil {
		select {
		case <-closed: // every request received was handed to handle
		case <-ctx.Done():
		}
	}
	sr.adm.Close() // from now on, refused unavailable
	if sr.adm.Drained(ctx) != nil {
		sr.in.stop()
		_ = sr.adm.Drained(context.Background())
	}
	sr.workers.Stop()
}

// handle runs on the subscription's goroutine, so it never waits: it admits the request and settles
// it on a worker goroutine (admission.Workers), or answers it at once.
func (sr *SaveRequests) handle(msg *nats.Msg) {
	start := sr.in.now()
	if msg.Reply == "" {
		sr.in.m.Saves.WithLabelValues(pathRequest, wire.CodeBadRequest).Inc()
		sr.in.log.Debug("save request without a reply subject: not acted on (send it as a request)", "subject", msg.Subject)
		return
	}
	sr.in.m.ReceivedBytes.Add(float64(len(msg.Data)))
	t, err := sr.adm.Admit(admission.ClassSave, int64(len(msg.Data)+headerBytes(msg.Header)))
	if err != nil && isGroup(msg.Header) {
		sr.answerGroupRefusal(msg, err)
		return
	}
	if err != nil {
		key, saveID, _ := attribute(wire.SaveSubjectPrefix, msg.Subject, msg.Header.Get(wire.HdrSaveID))
		sr.answer(msg, wire.SaveResult{SaveID: saveID, Key: key, Error: edge.ToWireError(err)}, start)
		return
	}
	sr.workers.Run(func() {
		defer func() { t.Done(sr.in.now().Sub(start)) }()
		if isGroup(msg.Header) {
			sr.serveGroup(msg, start) // savegroup.go
			return
		}
		sr.serve(msg, start)
	})
}

// serve settles one admitted request, answers it, then announces its result on the live subject
// cp.saved.<ns>.<saveid> (for watchers; not stored: a writer whose reply was lost sends the request
// again and gets the outcome as a duplicate) and removes its chunks, as for a save off the stream;
// but a save refused busy or unavailable keeps its chunks and publishes nothing: the writer
// retries the same request. A chunked save's other refusals are stored (storeChunkedRefusal).
func (sr *SaveRequests) serve(msg *nats.Msg, start time.Time) {
	key, saveID, err := attribute(wire.SaveSubjectPrefix, msg.Subject, msg.Header.Get(wire.HdrSaveID))
	if n := headerBytes(msg.Header); err == nil && n > maxHeaderBytes {
		err = fmt.Errorf("%w: headers of %d bytes, at most %d (as on the ingest stream)", edge.ErrBadRequest, n, maxHeaderBytes)
	}
	if err != nil {
		// Refused before settling: the reply alone carries the refusal (without a save id there
		// is no result subject).
		sr.answer(msg, wire.SaveResult{SaveID: saveID, Key: key, Error: edge.ToWireError(err)}, start)
		return
	}
	sr.in.requests.request(key.Namespace, start)
	sr.in.m.RequestSaves.Observe(1)
	ctx, cancel := context.WithTimeout(sr.in.ctx, saveRequestTimeout)
	defer cancel()
	res, chunks, err := sr.in.settle(ctx, key, saveID, msg.Header, msg.Data, pathRequest)
	if err != nil {
		// Storage trouble: nothing was decided, so nothing is published. The writer tries again
		// with the same save id.
		res = wire.SaveResult{Error: &wire.Error{Code: wire.CodeUnavailable,
			Message: fmt.Sprintf("storage: %v; try again with the same save id", storageCause(err))}}
	}
	res.SaveID, res.Key = saveID, key
	stored := false
	if err == nil && refused(res) {
		stored = chunks > 0 && !namesAnotherSave(res) && sr.storeChunkedRefusal(ctx, res)
		// Removed before the writer hears of the refusal, so that the save it sends again (the
		// same save id, its chunks published anew) finds none of these left.
		sr.in.removeChunks(ctx, key, saveID, msg.Header)
	}
	data := sr.answer(msg, res, start)
	if err != nil || res.Error != nil && res.Error.Code == wire.CodeBusy {
		// Not an outcome: the writer sends the same request again (its chunks are kept for it),
		// and a refusal stored on CP_RESULTS would only mislead a lookup there (§4.5).
		return
	}
	if namesAnotherSave(res) {
		return // its save id's subjects are the other save's
	}
	// A stored refusal reached the watchers already, published on cp.result.<ns>.<saveid>.
	if !stored {
		if err := sr.in.announceResult(res, data); err != nil {
			sr.in.log.Warn("save request: announcing the result failed (the writer has its reply)", "session", key, "save", saveID, "err", err)
		}
	}
	if !refused(res) {
		sr.in.removeChunks(ctx, key, saveID, msg.Header) // after the reply: off the save's latency
	}
	collectLargeSave(chunks)
}

// storeChunkedRefusal stores the refusal res of a chunked save on CP_RESULTS, as a save off the
// ingest stream stores every result, before its chunks are removed: a writer that lost the reply
// sends the same request again (same save id, its chunks not published again), which finds no
// chunks, and is answered this refusal from there rather than a bad_request about the chunks it
// already sent (Ingester.settledBefore). Only refusals decided on chunks read are stored: a save
// sent in one message is settled again from its body, with the same outcome; one refused on its
// headers, or whose chunks were not there, is refused the same again (and a request without
// chunks costs no write); an accepted one is recognised by its save id among the version records.
// It reports whether the refusal was stored;
// if not (storage did not answer in time), the chunks are removed all the same and a resend is
// refused for them, as before.
func (sr *SaveRequests) storeChunkedRefusal(ctx context.Context, res wire.SaveResult) bool {
	if err := sr.in.publishResult(ctx, res); err != nil {
		sr.in.log.Warn("save request: storing the refusal of a chunked save failed; a resend without its chunks will be refused for them",
			"session", res.Key, "save", res.SaveID, "err", err)
		return false
	}
	return true
}

// namesAnotherSave reports whether res refuses a save because its save id already made a version
// of another conversation (save_id_reused): that save id's result subjects (cp.saved, cp.result)
// are the other save's, which its watchers, and a lookup of its stored result, would take this
// refusal for. The writer has it in its reply; it is neither announced nor stored.
func namesAnotherSave(res wire.SaveResult) bool {
	return res.Error != nil && res.Error.Code == wire.CodeSaveIDReused
}

// storageCause is what a transient error says, shutdown named as such.
func storageCause(err error) error {
	if errors.Is(err, context.Canceled) {
		return errors.New("checkpointd is shutting down")
	}
	return err
}

// answer counts the result and replies with it (counted first, so that the metrics agree with
// what a writer was told as soon as it is told). It returns the result as sent, which is also
// what is announced. It is written by appendResult, as a group's
// are (docs/format.md §8.15u), and a refusal is cut to fit a message (refusalroom.go).
func (sr *SaveRequests) answer(msg *nats.Msg, res wire.SaveResult, start time.Time) []byte {
	sr.in.observe(pathRequest, res, start)
	data := encodeResult(res, replyRoom(sr.nc.MaxPayload()))
	if err := msg.Respond(data); err != nil {
		sr.in.log.Warn("save request: reply failed", "subject", msg.Subject, "save", res.SaveID, "err", err)
	}
	return data
}
