package oldcodec

// ValidCompact is the old syntax scan alone, for the benchmarks that compare the new one with it.
func ValidCompact(b []byte) bool { return validCompact(b) }
