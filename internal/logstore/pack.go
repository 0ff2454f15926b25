package logstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/checkpointd/checkpointd/internal/wire"
)

// Packing bounds what a read fetches: every entry costs the server and the client ~10 µs
// however small it is (a batched direct get of the corpus's 485 entries took 5.6–7.8 ms, one get
// of the same bytes in one message 0.2 ms), so the saves since the last pack are joined into one
// pack entry once they hold PackBytes of data or PackEntries entries. A pack holds their records
// and their messages, compressed again as one zstd frame (or, PackOpen, as they were stored); it
// is appended to the log subject with the compare-and-swap of a save (it carries the head, so it
// is the head until the next save), and the entries it packed are then deleted one by one. Each
// stored byte is thus written at most twice, and a read fetches at most size/PackBytes +
// PackEntries entries.
//
// A reader that finds packed entries not yet deleted (a crash between the pack and the deletes)
// skips them: a pack covers every save and lease between the previous pack and itself. The next
// pack deletes them.

// PackResult says what a pack did (zero: nothing due).
type PackResult struct {
	Entries int // entries packed (and deleted)
	Bytes   int // data bytes written
	Seq     uint64
}

// Pack packs key's tail if it is due; force packs any tail of two entries or more. The daemon
// calls it after answering a save, or when the session is idle.
func (s *Store) Pack(ctx context.Context, k wire.Key, force bool) (PackResult, error) {
	sess, err := s.session(ctx, k)
	if err != nil {
		return PackResult{}, err
	}
	sess.mu.Lock()
	defer sess.mu.Unlock()
	h := sess.last.Head
	due := h.TailEntries >= s.cfg.PackEntries || h.TailBytes >= s.cfg.PackBytes
	if s.cfg.NoPack || !due && !(force && h.TailEntries >= 2) {
		return PackResult{}, nil
	}
	res, err := s.pack(ctx, sess)
	if err != nil {
		s.forget(sess)
	}
	return res, err
}

func (s *Store) pack(ctx context.Context, sess *session) (PackResult, error) {
	// Read from the pack before the previous one: entries the previous pack covered but a crash
	// kept from deleting are deleted now (they are skipped, not packed again).
	prev, from := sess.lastPack(), uint64(1)
	if prev != 0 {
		body, _, err := s.directGet(ctx, `{"seq":`+strconv.FormatUint(prev, 10)+`}`)
		if err != nil {
			return PackResult{}, err
		}
		p, err := decodeAt(sess.subject, prev, body)
		if err != nil {
			return PackResult{}, err
		}
		from = p.meta.Head.Pack + 1
	}
	entries, err := s.readLogFrom(ctx, sess.subject, from, sess.lastSeq, 0, nil)
	if err != nil {
		return PackResult{}, err
	}
	var packed []Packed
	var seqs []uint64
	var pieces []*Piece
	var datas [][]byte
	for _, e := range entries {
		if e.kind != KindSave && e.kind != KindLease {
			continue // a fork entry stays first; packs stay
		}
		seqs = append(seqs, e.seq)
		if e.seq < prev || e.kind == KindLease {
			continue // a lease, or covered by prev and left by a crash: deleted, not packed
		}
		rec, err := recordOf(e.meta)
		if err != nil {
			return PackResult{}, err
		}
		packed = append(packed, Packed{Record: rec, Piece: *e.meta.Piece})
		pieces, datas = append(pieces, e.meta.Piece), append(datas, e.data)
	}
	if len(packed) == 0 {
		return PackResult{}, nil
	}
	data, err := s.packData(packed, pieces, datas)
	if err != nil {
		return PackResult{}, fmt.Errorf("%s: packing: %w", sess.subject, err)
	}
	meta := Meta{Head: sess.last.Head, Packed: packed, Open: s.cfg.PackOpen}
	meta.Head.Pack, meta.Head.TailEntries, meta.Head.TailBytes = prev, 0, 0
	body, err := encodeEntry(KindPack, meta, data)
	if err != nil {
		return PackResult{}, err
	}
	seq, err := s.publish(ctx, sess.subject, body, int64(sess.lastSeq))
	if err != nil {
		return PackResult{}, err
	}
	sess.lastSeq, sess.last = seq, meta
	if !meta.Open {
		sess.enc = nil // the next save starts a new frame: the pack replaced the frames it continued
	}
	res := PackResult{Entries: len(seqs), Bytes: len(data), Seq: seq}
	if s.crashBeforeDeletes {
		return res, nil
	}
	return res, s.deleteMsgs(ctx, seqs)
}

// packData is a pack's data. By default the packed saves are decoded and compressed again as one
// zstd frame (a stream cut at every save decodes 1.3–1.7× slower than the same bytes compressed at
// once: many small blocks, each with its tables); the pieces keep their sizes and Keep, and only
// the first starts a frame. With PackOpen, their stored bytes as they are.
func (s *Store) packData(packed []Packed, pieces []*Piece, datas [][]byte) ([]byte, error) {
	if s.cfg.PackOpen {
		return joinStored(pieces, datas), nil
	}
	plain, err := decodeRuns(pieces, datas)
	if err != nil {
		return nil, err
	}
	for i := range packed {
		packed[i].Piece.Frame = i == 0
	}
	return compressFrame(plain), nil
}

// lastPack is the sequence of the session's last pack (0: none).
func (sess *session) lastPack() uint64 {
	if sess.last.Packed != nil {
		return sess.lastSeq
	}
	return sess.last.Head.Pack
}

// deleteMsgs deletes messages by sequence, all requests sent at once ($JS.API.STREAM.MSG.DELETE
// with no_erase: the bytes stay in their block until JetStream drops or compacts it).
func (s *Store) deleteMsgs(ctx context.Context, seqs []uint64) error {
	inbox := s.nc.NewRespInbox()
	sub, err := s.nc.SubscribeSync(inbox)
	if err != nil {
		return err
	}
	defer func() { _ = sub.Unsubscribe() }()
	for _, seq := range seqs {
		req := []byte(`{"seq":` + strconv.FormatUint(seq, 10) + `,"no_erase":true}`)
		if err := s.nc.PublishRequest("$JS.API.STREAM.MSG.DELETE."+s.cfg.Stream, inbox, req); err != nil {
			return err
		}
	}
	for range seqs {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return fmt.Errorf("logstore: deleting packed entries: %w", err)
		}
		var reply struct {
			Success bool `json:"success"`
			Error   *struct {
				Description string `json:"description"`
			} `json:"error"`
		}
		if err := json.Unmarshal(m.Data, &reply); err != nil || !reply.Success {
			return fmt.Errorf("logstore: deleting packed entries: %s", m.Data)
		}
	}
	return nil
}
