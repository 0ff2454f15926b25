package engine

// CrashBeforeDeletes makes e's packs stop after their commit, as a crash would (tests).
func CrashBeforeDeletes(e *Engine, crash bool) { e.crashBeforeDeletes = crash }

// CutFrame is cutFrame (readzstd.go), for its tests.
func CutFrame(f []byte, raw int64) (out, plain []byte, ok bool, err error) { return cutFrame(f, raw) }

// CompressFrame is a pack's compression (stream.go).
func CompressFrame(b []byte) []byte { return compressFrame(b) }

// SetMaxRun lowers how much a run of saves sharing a frame decodes to (save.go maxRun).
func SetMaxRun(e *Engine, n int64) { e.maxRun = n }

// SavePiece decodes a stored entry and returns, for a save, whether its data starts a frame and
// how many bytes it decodes to.
func SavePiece(b []byte) (save, frame bool, raw int64, err error) {
	m, _, err := decodeEntry(b)
	if err != nil || m.Kind != kindSave {
		return false, false, 0, err
	}
	return true, m.Piece.Frame, m.Piece.RawBytes, nil
}
