package engine

// CrashBeforeDeletes makes e's packs stop after their commit, as a crash would (tests).
func CrashBeforeDeletes(e *Engine, crash bool) { e.crashBeforeDeletes = crash }

// CutFrame is cutFrame (readzstd.go), for its tests.
func CutFrame(f []byte, raw int64) (out, plain []byte, ok bool, err error) { return cutFrame(f, raw) }

// CompressFrame is a pack's compression (stream.go).
func CompressFrame(b []byte) []byte { return compressFrame(b) }
