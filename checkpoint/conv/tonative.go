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
func (m *Message) toNative(index int) ([]json.RawMessage, error) {
	return m.writeSplit(index, false, func(m *Message, index int) ([]json.RawMessage, error) {
		if m.Role == RoleSystem {
			return []json.RawMessage{m.systemPrompt()}, nil
		}
		if err := m.nativeClash(index); err != nil {
			return nil, err
		}
		return []json.RawMessage{m.encodeNativeMessage()}, nil
	})
}

// nativeClash refuses a message from another dialect that carries, among the members native does
// not read from it, one of a name native writes from the model (an openai-responses reasoning
// item's "content" beside the thinking it holds): written twice, one would hide the other.
func (m *Message) nativeClash(index int) error {
	if len(m.orig.members) > 0 { // decoded from native: its members are as they came
		return nil
	}
	for _, k := range m.nativeKnown() {
		if k.omit {
			continue
		}
		for _, f := range m.Extra {
			if f.Name == k.name {
				return &CarryError{Dialect: "native", Index: index, What: "member " + f.Name + " (" + string(f.Value) +
					") where native writes the message's " + k.name, Err: ErrNoConversion}
			}
		}
	}
	return nil
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
