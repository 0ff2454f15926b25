package ingest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/checkpointd/checkpointd/internal/engine"
	"github.com/checkpointd/checkpointd/internal/transfer/edge"
	"github.com/checkpointd/checkpointd/internal/wire"
)

// Group saves (docs/protocol.md §4.0.1): a request on a session's save subject whose Cp-Group
// header says its body holds k saves of that session (wire.ParseGroup). The daemon checks each
// save as it checks one sent alone, stores them in order with Engine.SaveGroup (one entry, so a
// burst of one session's appends costs one compare-and-swap), and replies with their k results.
// A save refused stops the group: those before it are stored, those after it are refused as
// conflicts (their bases no longer hold) without being stored. The request is admitted as a
// single save is (its whole body within the admission budget), so a group costs no more memory
// than a save of its size.

// isGroup reports whether a save request is a group.
func isGroup(h nats.Header) bool {
	_, ok := h[wire.HdrGroup]
	return ok
}

// answerGroupRefusal replies to a group refused whole before any of its saves was read.
func (sr *SaveRequests) answerGroupRefusal(msg *nats.Msg, err error) {
	we := edge.ToWireError(err)
	sr.in.m.Saves.WithLabelValues(pathRequest, we.Code).Inc()
	data, err := encodeGroupRefusal(we, replyRoom(sr.nc.MaxPayload())) // cut to fit (refusalroom.go)
	if err == nil {
		err = msg.Respond(data)
	}
	if err != nil {
		sr.in.log.Warn("save group: reply failed", "subject", msg.Subject, "err", err)
	}
}

// serveGroup settles an admitted group request and answers it.
func (sr *SaveRequests) serveGroup(msg *nats.Msg, start time.Time) {
	key, items, err := parseGroupRequest(msg)
	if err != nil {
		sr.answerGroupRefusal(msg, err)
		return
	}
	sr.in.requests.request(key.Namespace, start) // its writers reach cp.save (requestwatch.go)
	sr.in.m.RequestSaves.Observe(float64(len(items)))
	ctx, cancel := context.WithTimeout(sr.in.ctx, saveRequestTimeout)
	defer cancel()
	results, err := sr.in.settleGroup(ctx, key, msg.Header, items, replyRoom(sr.nc.MaxPayload()))
	if err != nil { // nothing stored: the writer sends the group again
		sr.answerGroupRefusal(msg, err)
		return
	}
	sr.observeGroup(key, results, start)
	encoded, reply := encodeGroupReply(results)
	if room := replyRoom(sr.nc.MaxPayload()); len(reply) > room { // a refusal quoting kilobytes
		fitGroupRefusals(results, room) // refusalroom.go
		encoded, reply = encodeGroupReply(results)
	}
	if err := msg.Respond(reply); err != nil {
		sr.in.log.Warn("save group: reply failed", "subject", msg.Subject, "err", err)
		return
	}
	for i, res := range results {
		if res.Error != nil && (res.Error.Code == wire.CodeBusy || res.Error.Code == wire.CodeUnavailable) {
			continue // not an outcome: the writer sends it again
		}
		if res.SaveID == "" || namesAnotherSave(res) {
			continue // no usable save id, or another save's: no result subject (as for a save sent alone)
		}
		if err := sr.in.announceResult(res, encoded[i]); err != nil {
			sr.in.log.Warn("save group: announcing a result failed (the writer has its reply)", "session", key, "save", res.SaveID, "err", err)
		}
	}
}

// observeGroup counts every save of a group as a save of the request path. The saves refused
// because one before them was are counted, but logged once, with the refusal that stopped them:
// a hostile group of 64 would otherwise write 64 log lines.
func (sr *SaveRequests) observeGroup(key wire.Key, results []wire.SaveResult, start time.Time) {
	stop := len(results)
	for i, res := range results {
		if i > stop && res.Error != nil {
			sr.in.m.SaveSeconds.Observe(sr.in.now().Sub(start).Seconds())
			sr.in.m.Saves.WithLabelValues(pathRequest, res.Error.Code).Inc()
			continue
		}
		sr.in.observe(pathRequest, res, start)
		if res.Error != nil && stop == len(results) {
			stop = i
		}
	}
	if n := len(results) - stop - 1; n > 0 {
		sr.in.log.Info("save group: saves after a refused one not stored", "session", key, "refused", stop, "not stored", n)
	}
}

// encodeGroupReply encodes each result once, into the reply (a wire.GroupReply): the results
// announced on cp.saved are slices of it.
func encodeGroupReply(results []wire.SaveResult) ([][]byte, []byte) {
	bounds := make([]int, len(results)+1)
	reply := make([]byte, 0, 16+len(results)*1024) // a stored save's result is ~700-1000 bytes
	reply = append(reply, `{"results":[`...)
	for i, res := range results {
		if i > 0 {
			reply = append(reply, ',')
		}
		bounds[i] = len(reply)
		reply = appendResult(reply, res) // resultjson.go
	}
	bounds[len(results)] = len(reply)
	reply = append(reply, "]}"...)
	encoded := make([][]byte, len(results))
	for i := range results {
		end := bounds[i+1]
		if i+1 < len(results) {
			end-- // the comma before the next one
		}
		encoded[i] = reply[bounds[i]:end:end]
	}
	return encoded, reply
}

// parseGroupRequest reads a group request's subject, headers and framing. Every error is a
// bad_request that says what and where.
func parseGroupRequest(msg *nats.Msg) (wire.Key, []wire.GroupItem, error) {
	key, err := wire.ParseToken(strings.TrimPrefix(msg.Subject, wire.SaveSubjectPrefix))
	if err != nil {
		return key, nil, fmt.Errorf("%w: subject %q is not %s<namespace>.<session>.<agent> with encoded ids (docs/protocol.md §2): %v", edge.ErrBadRequest, msg.Subject, wire.SaveSubjectPrefix, err)
	}
	if n := headerBytes(msg.Header); n > maxHeaderBytes {
		return key, nil, fmt.Errorf("%w: headers of %d bytes, at most %d", edge.ErrBadRequest, n, maxHeaderBytes)
	}
	for name := range msg.Header {
		if strings.HasPrefix(name, "Cp-") && !slices.Contains(wire.GroupSharedHeaders, name) {
			return key, nil, fmt.Errorf("%w: header %s on a group: each save's own fields go in its item (%v), and a chunked, forked or imported save is sent alone", edge.ErrBadRequest, name, wire.GroupItemFields)
		}
	}
	s, _, err := singleHeader(msg.Header, wire.HdrGroup, "the number of saves in the body, 1 to 64")
	if err != nil {
		return key, nil, err
	}
	k, err := wire.ParseGroupCount(s)
	if err != nil {
		return key, nil, err
	}
	items, err := wire.ParseGroup(msg.Data, k)
	return key, items, err
}

// groupSave is one save of a group once checked and read.
type groupSave struct {
	saveID   string
	req      engine.SaveRequest
	received func() string
}

// settleGroup checks and reads the saves of a group, stores those before the first refused one
// with Engine.SaveGroup, and returns one result per item. An error (busy or unavailable before
// anything was stored) refuses the whole group: the writer sends it again.
func (in *Ingester) settleGroup(ctx context.Context, key wire.Key, shared nats.Header, items []wire.GroupItem, room int) ([]wire.SaveResult, error) {
	mem := in.budget.begin(ctx)
	defer mem.end()
	results := make([]wire.SaveResult, len(items))
	saves := make([]groupSave, 0, len(items))
	refusedAt := len(items)
	busyAt, busyWhy := len(items), ""
	for i, item := range items {
		if room -= resultBound(key, shared, item); room < 0 && i > 0 {
			busyAt, busyWhy = i, noReplyRoom // its result might not fit the reply: sent again
			break
		}
		s, err := in.readGroupSave(ctx, key, shared, item, mem)
		results[i].SaveID, results[i].Key = s.saveID, key
		if isBusy(err) && i > 0 {
			busyAt, busyWhy = i, noMemory // no memory for this one: those read are stored, the rest sent again
			break
		}
		if err != nil && !isRefusal(err) || isBusy(err) {
			waitHashes(saves)
			return nil, err // storage trouble, or no memory: nothing stored yet
		}
		if err != nil {
			results[i].Error = itemError(i, err)
			refusedAt = i
			break
		}
		saves = append(saves, s)
		if i == 0 { // past the budget by what one save may hold, as a save sent alone
			mem.capExemption(in.maxBytes + receivedBytes(items))
		}
	}
	reqs := make([]engine.SaveRequest, len(saves))
	for i, s := range saves {
		reqs[i] = s.req
	}
	var stored []engine.GroupResult
	if len(reqs) > 0 {
		stored = in.engine.SaveGroup(ctx, reqs)
	}
	for i, g := range stored {
		results[i] = in.groupResult(key, i, saves[i], g)
	}
	for i := min(refusedAt+1, busyAt); i < len(items); i++ {
		results[i] = unreadResult(key, i, items[i], refusedAt, busyAt, busyWhy)
	}
	return results, nil
}

// Why the saves of a group from busyAt on were not read (unreadResult).
const (
	noMemory    = "no ingest memory to read it in time (--ingest-memory)"
	noReplyRoom = "the group's reply would not fit one message (the server's max_payload)"
)

// replyRoom is the room for a group's results in its reply, a message of at most maxPayload bytes
// ({"results":[...]}).
func replyRoom(maxPayload int64) int { return int(maxPayload) - 64 }

// resultBound bounds the bytes of a group save's result in the reply: ~1 KiB of what the daemon
// writes (version, parent, times, hash, counts, sizes, the words of an error) and what the client
// chose, echoed up to three times (the key and save id in the result, its version and an error's
// words), each byte escaped as JSON at worst 6 (\u0001). Writers are tens of bytes and save ids
// 22: ~2 KiB a save, so a group of 64 fits max_payload's default of 1 MiB many times over; a
// client that chose kilobytes of writer on a lowered max_payload gets the saves that do not fit
// answered busy, to send again.
func resultBound(key wire.Key, shared nats.Header, item wire.GroupItem) int {
	chosen := 3*(len(key.Namespace)+len(key.Session)+len(key.Agent)+len(firstField(item, wire.HdrSaveID))) +
		len(shared.Get(wire.HdrWriter)) + len(shared.Get(wire.HdrDialect)) + len(firstField(item, wire.HdrReason))
	return 1024 + 6*chosen
}

// unreadResult is the result of save i of a group, not read: after save refusedAt was refused, a
// conflict; from save busyAt on, busy for the reason why (sent again). Its save id names what is
// announced and echoed, so it is checked as any save id is; a save without a usable one gets a
// bad_request with no save id (and is announced nowhere).
func unreadResult(key wire.Key, i int, item wire.GroupItem, refusedAt, busyAt int, why string) wire.SaveResult {
	saveID := firstField(item, wire.HdrSaveID)
	err := checkSaveID(saveID)
	if err != nil {
		saveID = "" // no usable save id: none echoed, nothing announced (as attribute gives)
	}
	res := wire.SaveResult{SaveID: saveID, Key: key}
	switch {
	case err != nil:
		res.Error = itemError(i, err)
	case i >= busyAt:
		ms := budgetRetryAfter.Milliseconds()
		if why == noReplyRoom {
			ms = 0 // nothing to wait for
		}
		res.Error = &wire.Error{Code: wire.CodeBusy, RetryAfterMillis: &ms,
			Message: fmt.Sprintf("group save %d: %s: saves %d and on were not stored, send them again", i, why, busyAt)}
	default:
		res.Error = &wire.Error{Code: wire.CodeConflict,
			Message: fmt.Sprintf("an earlier save of the group was refused (save %d): not stored", refusedAt)}
	}
	return res
}

// receivedBytes is what the bodies of items take as received.
func receivedBytes(items []wire.GroupItem) int64 {
	n := 0
	for _, item := range items {
		n += len(item.Body)
	}
	return int64(n)
}

// firstField is an item's field name, "" if it has none.
func firstField(item wire.GroupItem, name string) string {
	if v := item.Fields[name]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// waitHashes waits for the hashing of saves already read, before their buffers go back.
func waitHashes(saves []groupSave) {
	for _, s := range saves {
		s.received()
	}
}

// itemError is a refusal of save i of a group, its message saying which one.
func itemError(i int, err error) *wire.Error {
	we := edge.ToWireError(err)
	we.Message = fmt.Sprintf("group save %d: %s", i, we.Message)
	return we
}

// readGroupSave checks one item of a group as a save sent alone is checked (its fields with the
// group's shared headers), and reads its body.
func (in *Ingester) readGroupSave(ctx context.Context, key wire.Key, shared nats.Header, item wire.GroupItem, mem *reservation) (groupSave, error) {
	h := nats.Header(item.Fields)
	for _, name := range []string{wire.HdrWriter, wire.HdrDialect, wire.HdrFormat} {
		if v, ok := shared[name]; ok {
			h[name] = v
		}
	}
	// The key is the group's, read from its subject (parseGroupRequest): only the save id is the
	// item's to check. (Checking it with attribute, which reads a key from a subject, cost each
	// item its session's subject encoded and decoded again: ~2 % of a grouped save's CPU.)
	saveID := h.Get(wire.HdrSaveID)
	if err := checkSaveID(saveID); err != nil {
		return groupSave{}, err
	}
	s := groupSave{saveID: saveID}
	hs, err := parseSaveHeaders(h, key, saveID, in.now(), in.maxBytes)
	if err != nil {
		return s, err
	}
	payload, _, err := in.readBody(ctx, hs, item.Body, mem) // no chunks in a group
	if err != nil {
		return s, err
	}
	s.received = wire.HashBeside(payload)
	s.req = in.saveRequest(hs, payload, mem)
	return s, nil
}

// groupResult is the result of one stored (or refused) save of a group.
func (in *Ingester) groupResult(key wire.Key, i int, s groupSave, g engine.GroupResult) wire.SaveResult {
	res, err := in.outcome(s.req.Key, g.Saved, g.Err, s.received)
	switch {
	case err != nil: // storage trouble: nothing decided for this save; the writer sends it again
		res = wire.SaveResult{Received: s.received(), Error: &wire.Error{Code: wire.CodeUnavailable,
			Message: fmt.Sprintf("storage: %v; try again with the same save id", storageCause(err))}}
	case res.Error != nil:
		res.Error.Message = fmt.Sprintf("group save %d: %s", i, res.Error.Message)
	}
	res.SaveID, res.Key = s.saveID, key
	return res
}
