package service

import "github.com/checkpointd/checkpointd/internal/wire"

// decodeReadRequest decodes a read request as decodeRequest does. A body in the plain shape the
// SDKs send is read by wire.PlainReadRequest, without encoding/json, whose reflection cost a
// restore of a head served from the read cache ~9 µs of the daemon's ~40 on two busy cores
// (docs/format.md §8.15k); any other body goes to encoding/json as before, so that what is
// accepted, and how, is unchanged.
func decodeReadRequest(body []byte, req *wire.ReadRequest) error {
	if r, ok := wire.PlainReadRequest(body); ok {
		*req = r
		return req.Validate()
	}
	return decodeRequest(body, req)
}
