package jobs

// AppendSpec is appendSpec, for the tests that compare it with json.Marshal.
var AppendSpec = appendSpec
