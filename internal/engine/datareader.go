package engine

import "context"

// ReadData reads the data of up to n entries of key's log after sequence after, as
// DataReader.ReadData does: through l's own ReadData when l is a DataReader, else with Range. A
// Log that wraps another (a decorator: sealing, bounds on each request) offers DataReader through
// this, so that wrapping a log never costs a restore its reads without sequences.
func ReadData(ctx context.Context, l Log, key Key, after uint64, n int, fn func(data []byte) bool) error {
	if n <= 0 {
		return nil
	}
	if dr, ok := l.(DataReader); ok {
		return dr.ReadData(ctx, key, after, n, fn)
	}
	return l.Range(ctx, key, after+1, 0, func(e Entry) bool {
		n--
		return fn(e.Data) && n > 0
	})
}
