package codec

import "strings"

// The swift-agent and agentsquad dialects: histories of two agent SDKs, whose tool results travel
// inside user messages. A user message holding only tool results counts as a ToolResult message.

// swiftItems are the content item types of each swift-agent role.
var swiftItems = map[string][]string{
	"user":      {"text", "image", "toolResult"},
	"assistant": {"text", "toolCall"},
}

// checkSwiftAgent validates a message of the Swift agent SDK: {id, role, content: [items]}.
func checkSwiftAgent(c checker, m object, _ bool, s *Stats) error {
	role, err := c.requireString(m, "", "role", false)
	if err != nil {
		return err
	}
	known, ok := swiftItems[role]
	if !ok {
		return c.unknownRole(role, "user or assistant")
	}
	if err := c.optionals(m, "", '"', "id"); err != nil {
		return err
	}
	items, results := 0, 0
	err = c.parts(m, "", "content", false, false, s, func(c checker, p object, field string, s *Stats) error {
		typ, err := c.partType(p, field, role, known...)
		if err != nil {
			return err
		}
		items++
		if typ == "toolResult" {
			results++
		}
		return swiftItem(c, p, typ, field, s)
	})
	if err != nil {
		return err
	}
	countByRole(s, role, items > 0 && results == items)
	return nil
}

func swiftItem(c checker, p object, typ, field string, s *Stats) error {
	at := field + "."
	switch typ {
	case "text":
		return c.strings(p, at, false, "text")
	case "image":
		if !present(p, "data") && !present(p, "fileURL") {
			return c.fail(ErrMalformed, field, "an image needs inline base64 \"data\" or a \"fileURL\"")
		}
		return c.optionals(p, at, '"', "data", "fileURL", "mimeType")
	case "toolCall":
		s.ToolCalls++
		if err := c.strings(p, at, true, "id", "name"); err != nil {
			return err
		}
		if a, ok := p.get("arguments"); !ok || kind(a) != '{' && kind(a) != '"' {
			return c.fail(ErrMalformed, at+"arguments", "want an object (or its JSON text), found %s", describe(a))
		}
	case "toolResult":
		if err := c.all(c.strings(p, at, true, "toolCallId"), c.optional(p, at, "isError", 't')); err != nil {
			return err
		}
		return c.parts(p, at, "content", true, false, s, func(c checker, q object, field string, s *Stats) error {
			typ, err := c.partType(q, field, "", "text", "image")
			if err != nil {
				return err
			}
			return swiftItem(c, q, typ, field, s)
		})
	}
	return nil
}

// swiftImages finds the strings of image items (in tool results too) naming local files: fileURL
// and any other member but the inline data and the MIME type.
func swiftImages(msg []byte) []imagePathSpan {
	var out []imagePathSpan
	var walk func(raw []byte, prefix string)
	walk = func(raw []byte, prefix string) {
		eachPart(raw, func(i int, p object) {
			field := prefix + "[" + itoa(i) + "]"
			if typeIs(p, "toolResult") {
				walk(p.value("content"), field+".content")
			}
			if !typeIs(p, "image") {
				return
			}
			for name, v := range p.all() {
				if name == "type" || name == "data" || name == "mimeType" {
					continue
				}
				if sp, ok := localSpan(msg, v, field+"."+name); ok {
					out = append(out, sp)
				}
			}
		})
	}
	walk(members(msg).value("content"), "content")
	return out
}

// countByRole counts a user or assistant message; a user message of tool results only counts
// as a ToolResult message.
func countByRole(s *Stats, role string, onlyResults bool) {
	switch {
	case role == "assistant":
		s.Assistant++
	case onlyResults:
		s.ToolResult++
	default:
		s.User++
	}
}

// agentSquadBlocks are the keys that say what an AgentSquad content block is (its blocks have no
// "type": they are Bedrock Converse blocks, named by their one key).
var agentSquadBlocks = []string{"text", "image", "toolUse", "toolResult"}

// checkAgentSquad validates a message of an AgentSquad ChatStorage history:
// {role, content: [blocks], timestamp}.
func checkAgentSquad(c checker, m object, _ bool, s *Stats) error {
	role, err := c.requireString(m, "", "role", false)
	if err != nil {
		return err
	}
	if role != "user" && role != "assistant" {
		return c.unknownRole(role, "user or assistant")
	}
	if err := c.optional(m, "", "timestamp", '0'); err != nil {
		return err
	}
	blocks, results := 0, 0
	err = c.parts(m, "", "content", false, false, s, func(c checker, p object, field string, s *Stats) error {
		blocks++
		key, err := agentSquadKind(c, p, field)
		if err != nil {
			return err
		}
		if key == "toolResult" {
			results++
		}
		return agentSquadBlock(c, p, key, field, s)
	})
	if err != nil {
		return err
	}
	countByRole(s, role, blocks > 0 && results == blocks)
	return nil
}

// agentSquadKind returns which of agentSquadBlocks block p is: exactly one of them.
func agentSquadKind(c checker, p object, field string) (string, error) {
	var found []string
	for _, k := range agentSquadBlocks {
		if p.has(k) {
			found = append(found, k)
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return "", c.fail(ErrUnknownContentType, field, "a block needs one of %s", strings.Join(agentSquadBlocks, ", "))
	}
	return "", c.fail(ErrMalformed, field, "a block holds one of %s, found %s", strings.Join(agentSquadBlocks, ", "), strings.Join(found, " and "))
}

func agentSquadBlock(c checker, p object, key, field string, s *Stats) error {
	at := field + "."
	if key == "text" {
		return c.strings(p, at, false, "text")
	}
	b, err := c.member(p, at, key)
	if err != nil {
		return err
	}
	at += key + "."
	switch key {
	case "image":
		if _, err := c.member(b, at, "source"); err != nil {
			return err
		}
		return c.strings(b, at, true, "format")
	case "toolUse":
		s.ToolCalls++
		if err := c.strings(b, at, true, "toolUseId", "name"); err != nil {
			return err
		}
		if in, ok := b.get("input"); !ok || kind(in) != '{' {
			return c.fail(ErrMalformed, at+"input", "want an object, found %s", describe(in))
		}
	case "toolResult":
		if err := c.all(c.strings(b, at, true, "toolUseId"), c.optional(b, at, "status", '"')); err != nil {
			return err
		}
		return c.parts(b, at, "content", false, false, s, func(c checker, q object, field string, s *Stats) error {
			if len(q) == 0 {
				return c.fail(ErrUnknownContentType, field, "an empty block")
			}
			return nil // text, json, image, document: Bedrock's to check; kept as they are
		})
	}
	return nil
}

// noImagePaths is the image finder of dialects whose images are inline bytes or remote objects.
func noImagePaths([]byte) []imagePathSpan { return nil }
