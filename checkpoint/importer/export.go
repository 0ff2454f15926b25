package importer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Export gives back the session file an imported conversation came from, from the records its
// messages name: each record once, in the file's order (a JSON Lines file a record a line; a JSON
// file as its object or array). Records are compact; every member and value is as it came.
func Export(conversation []byte) (format string, file []byte, err error) {
	var msgs []json.RawMessage
	if err := json.Unmarshal(conversation, &msgs); err != nil {
		return "", nil, fmt.Errorf("%w: not a conversation: %v", ErrBadFile, err)
	}
	records := map[string]json.RawMessage{}
	for i, m := range msgs {
		var head struct {
			Role     string          `json:"role"`
			Data     json.RawMessage `json:"data"`
			Imported *imported       `json:"imported"`
		}
		if err := json.Unmarshal(m, &head); err != nil || head.Imported == nil {
			return "", nil, fmt.Errorf("%w: message %d was not imported (no \"imported\" member)", ErrBadFile, i)
		}
		imp := head.Imported
		if format != "" && imp.From != format {
			return "", nil, fmt.Errorf("%w: message %d was imported from %s, the others from %s", ErrBadFile, i, imp.From, format)
		}
		format = imp.From
		switch {
		case imp.Part > 0: // a later message of one record: the first holds it
		case imp.Inline == "message" && len(imp.Records) == 1 && len(imp.At) == 1:
			records[imp.At[0]] = withMemberAdded(imp.Records[0], "message", without(m, "imported"))
		case len(imp.Records) == len(imp.At) && len(imp.Records) > 0:
			for k, at := range imp.At {
				records[at] = imp.Records[k]
			}
		case head.Role == "extension" && len(imp.At) == 1:
			records[imp.At[0]] = head.Data
		default:
			return "", nil, fmt.Errorf("%w: message %d names no record", ErrBadFile, i)
		}
	}
	switch format {
	case "pi", "claude-code", "codex":
		return format, joinLines(sortedRecords(records, "line ")), nil
	case "gemini-cli":
		header, ok := records["/"]
		if !ok {
			return "", nil, fmt.Errorf("%w: no session header", ErrBadFile)
		}
		delete(records, "/")
		return format, withMemberAdded(header, "messages", joinArray(sortedRecords(records, "/messages/"))), nil
	case "openhands":
		for at, header := range records {
			if !strings.Contains(at, "/") { // a row of evaluation output: its header, then its history
				delete(records, at)
				return format, append(withMemberAdded(header, "history", joinArray(sortedRecords(records, at+"/history/"))), '\n'), nil
			}
		}
		return format, joinArray(sortedRecords(records, "/")), nil
	}
	return "", nil, fmt.Errorf("%w: %q", ErrUnknownFormat, format)
}

// sortedRecords orders records by the number after prefix in their names.
func sortedRecords(records map[string]json.RawMessage, prefix string) []json.RawMessage {
	type rec struct {
		n int
		b json.RawMessage
	}
	var list []rec
	for at, b := range records {
		n, _ := strconv.Atoi(strings.TrimPrefix(at, prefix))
		list = append(list, rec{n, b})
	}
	sort.Slice(list, func(i, j int) bool { return list[i].n < list[j].n })
	out := make([]json.RawMessage, len(list))
	for i, r := range list {
		out[i] = r.b
	}
	return out
}

func joinLines(recs []json.RawMessage) []byte {
	var buf bytes.Buffer
	for _, r := range recs {
		buf.Write(r)
		buf.WriteByte('\n')
	}
	return buf.Bytes()
}

// withMemberAdded is obj with member name: v added last.
func withMemberAdded(obj json.RawMessage, name string, v []byte) json.RawMessage {
	out := append([]byte(nil), obj[:len(obj)-1]...)
	if len(obj) > 2 {
		out = append(out, ',')
	}
	k, _ := json.Marshal(name)
	out = append(append(append(out, k...), ':'), v...)
	return append(out, '}')
}
