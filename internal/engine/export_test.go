package engine

// CrashBeforeDeletes makes e's packs stop after their commit, as a crash would (tests).
func CrashBeforeDeletes(e *Engine, crash bool) { e.crashBeforeDeletes = crash }
