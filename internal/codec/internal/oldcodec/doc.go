// Package oldcodec is, in its _test.go files only, a frozen copy of internal/codec's validator
// (ParseLimited, the dialects, Classify) as it was before session 18 rewrote how it walks a
// payload (one pass, no maps, no allocation per message). It is no part of any build: the
// differential tests beside it use it as their oracle, so that every payload is accepted or refused
// as before, with the same error text, index, field and offset; BenchmarkParseCorpus_OldAndNew
// measures the two side by side. Do not change it; delete it with those tests once they are no
// longer wanted.
package oldcodec
