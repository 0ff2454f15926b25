package conv

import (
	"bytes"
	"encoding/json"
)

// source is where a message decoded from a non-native dialect came from: its exact bytes, and its
// native encoding at decode time (a later, different native encoding means it was changed).
type source struct {
	dialect string
	raw     json.RawMessage
	native  []byte
}

// toNative writes m as native messages. Native has no system role and no nested tool results:
// a system message becomes an extension message of kind "system_prompt" carrying its role and
// content; a message holding tool results becomes one toolResult message per result (and, when it
// holds anything else, a message of its own role with the rest before them).
func (m *Message) toNative() []json.RawMessage {
	out, _ := m.writeSplit(0, false, func(m *Message, _ int) ([]json.RawMessage, error) {
		if m.Role == RoleSystem {
			return []json.RawMessage{m.systemPrompt()}, nil
		}
		return []json.RawMessage{m.encodeNativeMessage()}, nil
	})
	return out
}

// systemPrompt is a system message as a native extension message.
func (m *Message) systemPrompt() json.RawMessage {
	role := string(RoleSystem)
	if m.sourceRole != "" {
		role = m.sourceRole
	}
	var data bytes.Buffer
	data.WriteString(`{"role":`)
	data.Write(encodeString(role))
	data.WriteString(`,"content":`)
	data.Write(contentKnown("content", m.Content, m.contentString).enc)
	data.WriteByte('}')
	ext := Message{Role: RoleExtension, Kind: "system_prompt", Data: data.Bytes(), Timestamp: m.Timestamp, Extra: m.Extra}
	return ext.encodeNativeMessage()
}
