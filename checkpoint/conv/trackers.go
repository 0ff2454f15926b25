package conv

import (
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// Trackers are what an agent keeps count of while it runs (turns, tool calls, tokens, cost,
// compactions, how full its context is), rebuilt from the messages alone: they are never stored
// (a checkpoint is the conversation and nothing else), so a process that restores a session gets
// the same trackers as the one that saved it by feeding the same messages to a Tracker.
type Trackers struct {
	Messages int `json:"messages"`
	// TurnStarts are the indices of the messages that start a turn: each user message that holds
	// something other than tool results (a compaction summary or a tool result starts none).
	TurnStarts []int `json:"turnStarts"`
	// Turns are the tokens and cost of each turn's responses, and their running totals.
	Turns []Turn `json:"turns"`
	// Tools counts tool calls by tool name, and the results that were errors.
	Tools map[string]*ToolStats `json:"tools"`
	// Usage and Cost are the totals of every response, before the first turn too.
	Usage Tokens  `json:"usage"`
	Cost  float64 `json:"cost"`
	// Compactions are the indices of the compaction markers.
	Compactions []int `json:"compactions"`
	// LastResponse is the last assistant message, nil when there is none.
	LastResponse *Response `json:"lastResponse"`
	// Context is how many tokens the request view (from the last compaction marker on) holds.
	Context Context `json:"context"`
	// Unread names the counts that could not be read as whole numbers (message index and field),
	// left out of the totals rather than guessed.
	Unread []string `json:"unread,omitempty"`
}

// Turn is one turn: where it starts, the tokens and cost of its responses, and the totals so far.
type Turn struct {
	Start          int     `json:"start"`
	Usage          Tokens  `json:"usage"`
	Cost           float64 `json:"cost"`
	CumulativeCost float64 `json:"cumulativeCost"`
	Cumulative     Tokens  `json:"cumulative"`
}

// Tokens are token counts, as the model's Usage names them.
type Tokens struct {
	Input      int64 `json:"input"`
	Output     int64 `json:"output"`
	CacheRead  int64 `json:"cacheRead"`
	CacheWrite int64 `json:"cacheWrite"`
	Total      int64 `json:"total"`
}

// ToolStats counts the calls of one tool and the error results among their answers.
type ToolStats struct {
	Calls  int `json:"calls"`
	Errors int `json:"errors"`
	// ErrorAt are the indices of the messages holding the error results.
	ErrorAt []int `json:"errorAt"`
}

// Response is the last assistant message: where it is, who answered and why it stopped.
type Response struct {
	Index      int    `json:"index"`
	Model      string `json:"model,omitempty"`
	Provider   string `json:"provider,omitempty"`
	StopReason string `json:"stopReason,omitempty"`
	Text       string `json:"text"`
	Usage      Tokens `json:"usage"`
}

// Context is the size of the request view: the context tokens the last response in it reported
// (input, output and cache tokens: what the model held once it answered) plus an estimate of the
// messages after it (4 bytes of text a token, as runtimes estimate), or, with no response in it
// yet, the estimate of every message in it.
type Context struct {
	Start     int   `json:"start"` // the request view's first message (0, or the last compaction marker)
	Tokens    int64 `json:"tokens"`
	Reported  int64 `json:"reported"`  // by the last response's usage
	Estimated int64 `json:"estimated"` // of the messages after it
	// Window and Left: the context window given (Tracker.Window, --context-window) and the room
	// left in it (negative: over); both 0 when no window was given.
	Window int64  `json:"window,omitempty"`
	Left   *int64 `json:"left,omitempty"`
}

// Tracker keeps Trackers up to date as messages come, one by one.
type Tracker struct {
	// Window, when positive, is the model's context window: Trackers then says the room left.
	Window int64

	t        Trackers
	callName map[string]string // tool call id -> tool name
	turn     *Turn
}

// Track returns the trackers of c's messages.
func Track(c *Conversation, window int64) Trackers {
	tr := &Tracker{Window: window}
	for i := range c.Messages {
		tr.Add(&c.Messages[i])
	}
	return tr.Trackers()
}

// Add counts message m, the next message of the conversation. m is only read.
func (tr *Tracker) Add(m *Message) {
	if tr.callName == nil {
		tr.callName = map[string]string{}
		tr.t.Tools = map[string]*ToolStats{}
		tr.t.TurnStarts, tr.t.Turns, tr.t.Compactions = []int{}, []Turn{}, []int{}
	}
	i := tr.t.Messages
	tr.t.Messages++
	switch {
	case m.IsCompaction():
		tr.t.Compactions = append(tr.t.Compactions, i)
		tr.t.Context = Context{Start: i, Estimated: estimate(m)}
		return
	case startsTurn(m):
		tr.t.TurnStarts = append(tr.t.TurnStarts, i)
		tr.t.Turns = append(tr.t.Turns, Turn{Start: i, Cumulative: tr.t.Usage, CumulativeCost: tr.t.Cost})
		tr.turn = &tr.t.Turns[len(tr.t.Turns)-1]
	}
	for _, p := range m.Content {
		switch p.Type {
		case PartToolCall:
			tr.call(p.ID, p.Name)
		case PartToolResult:
			tr.result(i, p.ID, "", p.IsError)
		}
	}
	if m.Role == RoleToolResult {
		tr.result(i, m.ToolCallID, m.ToolName, m.IsError)
	}
	if m.Role == RoleAssistant {
		tr.response(i, m)
		return
	}
	tr.t.Context.Estimated += estimate(m)
}

func (tr *Tracker) call(id, name string) {
	tr.callName[id] = name
	s := tr.stats(name)
	s.Calls++
}

func (tr *Tracker) result(i int, id, name string, isError bool) {
	if n, ok := tr.callName[id]; ok {
		name = n
	}
	if name == "" {
		name = "(unknown)" // a result of a call not in the conversation, without a toolName
	}
	if !isError {
		return
	}
	s := tr.stats(name) // a result whose call is not in the conversation counts by its own toolName
	s.Errors++
	s.ErrorAt = append(s.ErrorAt, i)
}

func (tr *Tracker) stats(name string) *ToolStats {
	s, ok := tr.t.Tools[name]
	if !ok {
		s = &ToolStats{ErrorAt: []int{}}
		tr.t.Tools[name] = s
	}
	return s
}

// response counts an assistant message: its tokens and cost, and the context it reports.
func (tr *Tracker) response(i int, m *Message) {
	tokens, cost := tr.usage(i, m.Usage)
	add(&tr.t.Usage, tokens)
	tr.t.Cost += cost
	if tr.turn != nil {
		add(&tr.turn.Usage, tokens)
		tr.turn.Cost += cost
		tr.turn.Cumulative, tr.turn.CumulativeCost = tr.t.Usage, tr.t.Cost
	}
	tr.t.LastResponse = &Response{Index: i, Model: m.Model, Provider: m.Provider, StopReason: m.StopReason, Text: m.TextOf(), Usage: tokens}
	if m.Usage == nil {
		tr.t.Context.Estimated += estimate(m)
		return
	}
	reported := tokens.Total // what the model held once it answered
	if reported == 0 {
		reported = tokens.Input + tokens.Output + tokens.CacheRead + tokens.CacheWrite
	}
	tr.t.Context.Reported, tr.t.Context.Estimated = reported, 0
}

// usage reads u's counts and its cost (native's usage.cost.total); a count that is not a whole
// number is named in Unread and left out.
func (tr *Tracker) usage(i int, u *Usage) (Tokens, float64) {
	if u == nil {
		return Tokens{}, 0
	}
	read := func(name string, n json.Number) int64 {
		if n == "" {
			return 0
		}
		v, err := strconv.ParseInt(string(n), 10, 64)
		if err != nil || v < 0 {
			tr.t.Unread = append(tr.t.Unread, fmt.Sprintf("message %d: usage.%s %s", i, name, n))
			return 0
		}
		return v
	}
	t := Tokens{Input: read("input", u.Input), Output: read("output", u.Output), CacheRead: read("cacheRead", u.CacheRead),
		CacheWrite: read("cacheWrite", u.CacheWrite), Total: read("total", u.Total)}
	return t, costOf(u)
}

// costOf is native usage's cost.total, 0 when there is none.
func costOf(u *Usage) float64 {
	for _, f := range u.Extra {
		if f.Name != "cost" || len(f.Value) == 0 || f.Value[0] != '{' {
			continue
		}
		if v, ok := parseObject(f.Value).value("total"); ok {
			if c, err := strconv.ParseFloat(string(v), 64); err == nil {
				return c
			}
		}
	}
	return 0
}

func add(a *Tokens, b Tokens) {
	a.Input += b.Input
	a.Output += b.Output
	a.CacheRead += b.CacheRead
	a.CacheWrite += b.CacheWrite
	a.Total += b.Total
}

// startsTurn reports whether m starts a turn: a user message holding more than tool results.
func startsTurn(m *Message) bool {
	if m.Role != RoleUser {
		return false
	}
	for _, p := range m.Content {
		if p.Type != PartToolResult {
			return true
		}
	}
	return len(m.Content) == 0
}

// estimate is m's size in tokens, as runtimes estimate it before a model has counted: 4 bytes
// of text (and of tool arguments and data) a token, rounded up; an image counts as 1,200 tokens.
func estimate(m *Message) int64 {
	n := 0
	var parts func(ps []Part)
	parts = func(ps []Part) {
		for _, p := range ps {
			switch p.Type {
			case PartImage:
				n += 4800
			case PartToolResult:
				parts(p.Result)
			default:
				n += utf8.RuneCountInString(p.Text) + utf8.RuneCountInString(p.Thinking) + len(p.Name) + len(p.Arguments)
			}
		}
	}
	parts(m.Content)
	if m.IsCompaction() {
		n += len(m.Data)
	}
	return int64((n + 3) / 4)
}

// Trackers returns the trackers so far (a copy: adding more messages does not change it).
func (tr *Tracker) Trackers() Trackers {
	t := tr.t
	if tr.callName == nil { // no message yet
		t.TurnStarts, t.Turns, t.Compactions, t.Tools = []int{}, []Turn{}, []int{}, map[string]*ToolStats{}
	}
	t.TurnStarts = append([]int{}, t.TurnStarts...)
	t.Turns = append([]Turn{}, t.Turns...)
	t.Compactions = append([]int{}, t.Compactions...)
	t.Unread = append([]string(nil), t.Unread...)
	tools := make(map[string]*ToolStats, len(t.Tools))
	for name, s := range t.Tools {
		c := *s
		c.ErrorAt = append([]int{}, s.ErrorAt...)
		tools[name] = &c
	}
	t.Tools = tools
	if t.LastResponse != nil {
		r := *t.LastResponse
		t.LastResponse = &r
	}
	t.Context.Tokens = t.Context.Reported + t.Context.Estimated
	if tr.Window > 0 {
		left := tr.Window - t.Context.Tokens
		t.Context.Window, t.Context.Left = tr.Window, &left
	}
	return t
}
