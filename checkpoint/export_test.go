package checkpoint

// CheckResult exposes checkResult to the external tests of this package.
var CheckResult = (*Client).checkResult
