package oldcodec

import (
	"maps"
	"slices"
	"strings"
)

// The openai-responses dialect: the input items of OpenAI's Responses API (what a stateless client
// resends every turn). An item is a message (with or without "type": "message"), a function_call,
// its function_call_output, a reasoning item, or one of the API's other input items (responsesItems:
// hosted and built-in tools, their outputs, MCP, compaction, references). Messages count by role
// (system and developer as System); calls and reasoning are the model's output and count as
// Assistant, calls also as tool calls; their outputs count as ToolResult.

var responsesMessageParts = map[string][]string{
	"user":      {"input_text", "input_image", "input_file", "input_audio"},
	"system":    {"input_text"},
	"developer": {"input_text"},
	"assistant": {"output_text", "refusal", "input_text"},
}

func checkOpenAIResponses(c checker, m object, _ bool, s *Stats) error {
	typ := "message"
	if !present(m, "type") && !present(m, "role") && present(m, "id") {
		typ = "item_reference" // its type is optional (null or absent) in the API
	} else if raw, ok := m["type"]; ok || !present(m, "role") {
		if kind(raw) != '"' {
			err := c.checkString(m, "", "type", true)
			return err
		}
		typ = stringValue(raw)
	}
	if err := c.optionals(m, "", '"', "id", "status"); err != nil {
		return err
	}
	switch typ {
	case "message":
		return responsesMessage(c, m, s)
	case "function_call":
		s.Assistant++
		s.ToolCalls++
		return c.all(c.strings(m, "", true, "call_id", "name"), c.strings(m, "", false, "arguments"))
	case "function_call_output":
		s.ToolResult++
		if err := c.strings(m, "", true, "call_id"); err != nil {
			return err
		}
		return c.parts(m, "", "output", true, false, s, responsesPart("", "input_text", "input_image", "input_file"))
	case "reasoning":
		s.Assistant++
		if err := c.optional(m, "", "encrypted_content", '"'); err != nil {
			return err
		}
		if err := c.parts(m, "", "summary", false, false, s, responsesPart("", "summary_text")); err != nil {
			return err
		}
		return c.parts(m, "", "content", false, true, s, responsesPart("", "reasoning_text"))
	}
	if it, ok := responsesItems[typ]; ok {
		return it.check(c, m, s)
	}
	return c.fail(ErrUnknownContentType, "type", "%q (want message, function_call, function_call_output, reasoning or another input item of the Responses API: %s)",
		typ, strings.Join(slices.Sorted(maps.Keys(responsesItems)), ", "))
}

// responsesItem is the schema of one of the Responses API's other input items: the members it must
// have, each of a JSON kind (null allowed where the API allows it), and how it counts. Members not
// listed, and what is inside those listed (a computer action, an MCP tool list), are kept as they
// are: their shapes change with every new tool, and nothing here reads them.
type responsesItem struct {
	count    func(s *Stats)
	required []responsesMember
}

type responsesMember struct {
	name     string
	kinds    string // the JSON kinds accepted: '"', '[', '{', 't', or 'n' for null
	nonEmpty bool   // a string that must not be ""
}

func (it responsesItem) check(c checker, m object, s *Stats) error {
	for _, r := range it.required {
		raw, ok := m[r.name]
		if !ok {
			return c.fail(ErrMalformed, r.name, "missing")
		}
		if !strings.ContainsRune(r.kinds, rune(kind(raw))) {
			var want []string
			for _, k := range []byte(r.kinds) {
				want = append(want, kindNames[k])
			}
			return c.fail(ErrMalformed, r.name, "want %s, found %s", strings.Join(want, " or "), describe(raw))
		}
		if r.nonEmpty && stringValue(raw) == "" {
			return c.fail(ErrMalformed, r.name, "must not be empty")
		}
	}
	it.count(s)
	return nil
}

func toolCall(s *Stats)    { s.Assistant++; s.ToolCalls++ }
func modelOutput(s *Stats) { s.Assistant++ }
func toolOutput(s *Stats)  { s.ToolResult++ }
func userInput(s *Stats)   { s.User++ }
func instruction(s *Stats) { s.System++ }
func otherItem(s *Stats)   { s.Extension++ }

// id is a call's or item's id: a non-empty string.
func id(name string) responsesMember        { return responsesMember{name: name, kinds: `"`, nonEmpty: true} }
func of(name, kinds string) responsesMember { return responsesMember{name: name, kinds: kinds} }

// responsesItems are the input items of the Responses API besides messages, function calls and
// their outputs, and reasoning (ResponseInputItem in OpenAI's API reference and SDKs), with the
// members the API requires.
var responsesItems = map[string]responsesItem{
	"file_search_call":        {toolCall, []responsesMember{id("id"), of("queries", "["), of("status", `"`)}},
	"computer_call":           {toolCall, []responsesMember{id("id"), id("call_id"), of("pending_safety_checks", "["), of("status", `"`)}},
	"computer_call_output":    {toolOutput, []responsesMember{id("call_id"), of("output", "{")}},
	"web_search_call":         {toolCall, []responsesMember{id("id"), of("action", "{"), of("status", `"`)}},
	"tool_search_call":        {toolCall, []responsesMember{of("arguments", `{["0tn`)}},
	"tool_search_output":      {toolOutput, []responsesMember{of("tools", "[")}},
	"additional_tools":        {instruction, []responsesMember{of("role", `"`), of("tools", "[")}},
	"configuration_update":    {otherItem, nil},
	"compaction":              {otherItem, []responsesMember{of("encrypted_content", `"`)}},
	"compaction_trigger":      {otherItem, nil},
	"image_generation_call":   {toolCall, []responsesMember{id("id"), of("result", `"n`), of("status", `"`)}},
	"code_interpreter_call":   {toolCall, []responsesMember{id("id"), of("code", `"n`), of("container_id", `"`), of("outputs", "[n"), of("status", `"`)}},
	"local_shell_call":        {toolCall, []responsesMember{id("id"), of("action", "{"), id("call_id"), of("status", `"`)}},
	"local_shell_call_output": {toolOutput, []responsesMember{id("id"), of("output", `"`)}},
	"shell_call":              {toolCall, []responsesMember{of("action", "{"), id("call_id")}},
	"shell_call_output":       {toolOutput, []responsesMember{id("call_id"), of("output", "[")}},
	"apply_patch_call":        {toolCall, []responsesMember{id("call_id"), of("operation", "{"), of("status", `"`)}},
	"apply_patch_call_output": {toolOutput, []responsesMember{id("call_id"), of("status", `"`)}},
	"mcp_list_tools":          {modelOutput, []responsesMember{id("id"), of("server_label", `"`), of("tools", "[")}},
	"mcp_approval_request":    {modelOutput, []responsesMember{id("id"), of("arguments", `"`), of("name", `"`), of("server_label", `"`)}},
	"mcp_approval_response":   {userInput, []responsesMember{id("approval_request_id"), of("approve", "t")}},
	"mcp_call":                {toolCall, []responsesMember{id("id"), of("arguments", `"`), of("name", `"`), of("server_label", `"`)}},
	"custom_tool_call":        {toolCall, []responsesMember{id("call_id"), of("input", `"`), of("name", `"`)}},
	"custom_tool_call_output": {toolOutput, []responsesMember{id("call_id"), of("output", `"[`)}},
	"item_reference":          {otherItem, []responsesMember{id("id")}},
	"program":                 {toolCall, []responsesMember{id("id"), id("call_id"), of("code", `"`), of("fingerprint", `"`)}},
	"program_output":          {toolOutput, []responsesMember{id("id"), id("call_id"), of("result", `"`), of("status", `"`)}},
}

func responsesMessage(c checker, m object, s *Stats) error {
	role, err := c.requireString(m, "", "role", false)
	if err != nil {
		return err
	}
	known, ok := responsesMessageParts[role]
	if !ok {
		return c.unknownRole(role, "user, assistant, system or developer")
	}
	switch role {
	case "user":
		s.User++
	case "assistant":
		s.Assistant++
	default:
		s.System++
	}
	return c.parts(m, "", "content", true, false, s, responsesPart(role, known...))
}

func responsesPart(role string, known ...string) partFunc {
	return func(c checker, p object, field string, _ *Stats) error {
		typ, err := c.partType(p, field, role, known...)
		if err != nil {
			return err
		}
		at := field + "."
		switch typ {
		case "input_text", "output_text", "summary_text", "reasoning_text":
			return c.all(c.strings(p, at, false, "text"), c.optional(p, at, "annotations", '['))
		case "refusal":
			return c.strings(p, at, false, "refusal")
		case "input_image":
			if !present(p, "image_url") && !present(p, "file_id") {
				return c.fail(ErrMalformed, field, "an input_image needs \"image_url\" or \"file_id\"")
			}
			return c.optionals(p, at, '"', "image_url", "file_id", "detail")
		case "input_file":
			if !present(p, "file_data") && !present(p, "file_id") && !present(p, "file_url") {
				return c.fail(ErrMalformed, field, "an input_file needs \"file_data\", \"file_id\" or \"file_url\"")
			}
			return c.optionals(p, at, '"', "file_data", "file_id", "file_url", "filename")
		case "input_audio":
			a, err := c.member(p, at, "input_audio")
			if err != nil {
				return err
			}
			return c.strings(a, at+"input_audio.", true, "data", "format")
		}
		return nil
	}
}

// responsesImages finds image_url of input_image parts and file_url of input_file parts naming
// local files, in messages' content and function outputs.
func responsesImages(msg []byte) []imagePathSpan {
	var out []imagePathSpan
	m := members(msg)
	for _, name := range []string{"content", "output"} {
		eachPart(m[name], func(i int, p object) {
			for typ, member := range map[string]string{"input_image": "image_url", "input_file": "file_url"} {
				if typeIs(p, typ) {
					if sp, ok := localSpan(msg, p[member], name+"["+itoa(i)+"]."+member); ok {
						out = append(out, sp)
					}
				}
			}
		})
	}
	return out
}
