package pieces

// HashRoom is what j reserved for the hashes of its pieces (SkipRepeats), beside their bytes.
func HashRoom(j *Joiner) int64 { return sumSize * int64(cap(j.sums)) }
