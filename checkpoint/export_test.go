package checkpoint

// CheckResult exposes checkResult to the external tests of this package.
var CheckResult = (*Client).checkResult

// CheckRepeat exposes checkRepeat: the SDK's own check of a duplicate's version against the
// whole conversation a Save stores, and whether it could tell.
func CheckRepeat(v Version, whole []byte) (bool, error) {
	return checkRepeat(v, saveOptions{saveID: "turn-1", whole: whole})
}
