package replicated

// DecodeSetJobsDiff is decodeSetJobsDiff, for the test that holds its
// answers to json.Unmarshal's.
var DecodeSetJobsDiff = decodeSetJobsDiff
