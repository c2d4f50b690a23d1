package jobstest

import (
	"math/rand/v2"
	"reflect"
)

// OddStrings are strings encoding/json escapes, or must not: quotes,
// backslashes, control characters, HTML's three, DEL, U+2028 and U+2029,
// invalid UTF-8, and plain text in several scripts.
var OddStrings = []string{
	"", "job-000001", `a"b`, `c\d`, "line\nbreak\r\t", "\b\f\x00\x01\x1f", "<script>&amp;</script>",
	"\x7f", "\u2028\u2029", "caf\xc3", "\xff\xfe", "日本語", "emoji \U0001F600", "a\u2028b\xe2\x80", "0 9 * * *",
}

// Fill sets v (addressable) to a random value of its type: every field of
// a struct, recursively; a nil, empty or filled list, map or pointer.
func Fill(r *rand.Rand, v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(OddStrings[r.IntN(len(OddStrings))])
	case reflect.Bool:
		v.SetBool(r.IntN(2) == 1)
	case reflect.Int, reflect.Int64:
		// Zero often (omitempty), else anything, durations included.
		if r.IntN(3) > 0 {
			v.SetInt(r.Int64N(1<<50) - 1<<49)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() && r.IntN(5) > 0 {
				Fill(r, v.Field(i))
			}
		}
	case reflect.Pointer:
		if r.IntN(2) == 1 {
			p := reflect.New(v.Type().Elem())
			Fill(r, p.Elem())
			v.Set(p)
		}
	case reflect.Slice:
		switch r.IntN(3) {
		case 1:
			v.Set(reflect.MakeSlice(v.Type(), 0, 0))
		case 2:
			s := reflect.MakeSlice(v.Type(), 1+r.IntN(3), 3)
			for i := range s.Len() {
				Fill(r, s.Index(i))
			}
			v.Set(s)
		}
	case reflect.Map:
		switch r.IntN(3) {
		case 1:
			v.Set(reflect.MakeMap(v.Type()))
		case 2:
			m := reflect.MakeMap(v.Type())
			for range 1 + r.IntN(4) {
				k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
				Fill(r, k)
				Fill(r, e)
				m.SetMapIndex(k, e)
			}
			v.Set(m)
		}
	default:
		panic("Fill: no case for " + v.Type().String())
	}
}
