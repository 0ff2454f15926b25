package wire

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
)

// A group framed by AppendGroupItem parses back to the same items, bodies aliasing the request.
func TestGroup_RoundTrip(t *testing.T) {
	var body []byte
	for i := 0; i < MaxGroupSaves; i++ {
		body = AppendGroupItem(body, [][2]string{{HdrSaveID, fmt.Sprint("s", i)}, {HdrBaseVersion, fmt.Sprint(i)}}, []byte(fmt.Sprintf(`[{"n":%d}]`, i)))
	}
	items, err := ParseGroup(body, MaxGroupSaves)
	if err != nil {
		t.Fatal(err)
	}
	for i, it := range items {
		if got := it.Fields[HdrSaveID][0]; got != fmt.Sprint("s", i) {
			t.Fatalf("item %d: save id %q", i, got)
		}
		if !bytes.Equal(it.Body, []byte(fmt.Sprintf(`[{"n":%d}]`, i))) {
			t.Fatalf("item %d: body %q", i, it.Body)
		}
	}
}

// Whatever the bytes and the count, ParseGroup returns items within the body or a bad_request
// naming the save; it never panics, and never takes a body's bytes twice.
func FuzzParseGroup(f *testing.F) {
	f.Add(AppendGroupItem(nil, [][2]string{{HdrSaveID, "a"}}, []byte("[]")), 1)
	f.Add([]byte("21 4000000000\r\nCp-Save-Id: x\r\n[]"), 1)
	f.Add([]byte("0 0\r\n0 0\r\n"), 2)
	f.Fuzz(func(t *testing.T, body []byte, k int) {
		if k < 1 || k > MaxGroupSaves {
			return
		}
		items, err := ParseGroup(body, k)
		if err != nil {
			var we *Error
			if !errors.As(err, &we) || we.Code != CodeBadRequest {
				t.Fatalf("not a bad_request: %v", err)
			}
			return
		}
		if len(items) != k {
			t.Fatalf("%d items for %d", len(items), k)
		}
		total := 0
		for _, it := range items {
			total += len(it.Body)
		}
		if total > len(body) {
			t.Fatalf("bodies of %d bytes from %d", total, len(body))
		}
	})
}
