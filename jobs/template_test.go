package jobs

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestSpec_OutputKey_TemplatesThatCannotStall: the templates a key or a
// body needs render; every way the Go template language has to loop,
// recurse or grow without end is refused when the template is parsed,
// with its line and column, or stops at a bound when it runs.
func TestSpec_OutputKey_TemplatesThatCannotStall(t *testing.T) {
	at := time.Date(2026, time.March, 31, 9, 0, 0, 0, time.UTC)
	for _, tc := range []struct{ tmpl, want string }{
		{`reports/{{ .Scheduled.Format "2006-01" }}.csv`, "reports/2026-03.csv"},
		{`reports/{{ (.Scheduled.AddDate 0 0 -31).Format "2006-01" }}.csv`, "reports/2026-02.csv"},
		{`{{ printf "%s/%02d" .Job .Scheduled.Day }}`, "report/31"},
		{`c/{{ if eq .Scheduled.Day 31 }}last{{ else }}day{{ end }}.txt`, "c/last.txt"},
		{`{{ with .Scheduled }}{{ .Format "2006" }}{{ end }}/{{ $.Job }}`, "2026/report"},
		{`{{ .Job | printf "%s.txt" }}`, "report.txt"},
		{`runs/{{ .RunID | urlquery }}`, "runs/report%4020260331T090000Z"},
	} {
		s := Spec{Name: "report", Output: tc.tmpl}
		if got, err := s.OutputKey(at); err != nil || got != tc.want {
			t.Errorf("%s: %q, %v; want %q", tc.tmpl, got, err, tc.want)
		}
	}
	for _, tc := range []struct{ tmpl, want string }{
		{`{{range 300000000}}{{end}}`, "line 1, column 1: range is not allowed"},
		{"c/{{if eq .Scheduled.Day 31}}x{{else}}\n  {{range 300000000}}{{end}}y{{end}}.txt", "line 2, column 3: range is not allowed"},
		{`{{define "a"}}{{template "a"}}{{end}}{{template "a"}}`, "define and block are not allowed"},
		{`{{block "a" .}}x{{end}}`, "define and block are not allowed"},
		{`{{$x := print .Job .Job}}{{$x}}`, "variables are not allowed"},
		{`{{ .Scheduled.Format (.Scheduled.Format "1") }}`, "a method's arguments must be literals"},
		{`{{ "1" | .Scheduled.Format }}`, "a method is not given a piped value"},
		{`{{ call .Job }}`, "call is not allowed"},
		{`{{ printf "%0999999999d" 1 }}`, "more than two digits"},
		{`{{ printf "%*d" 999999999 1 }}`, "from an argument (*)"},
		{`{{ printf "%[1]s%[1]s%[1]s" .RunID }}`, "an argument index ([n]) is not allowed"},
		{`x/{{ printf "%099d%099d%099d%099d%099d%099d%099d%099d%099d%099d%099d" 1 2 3 4 5 6 7 8 9 10 11 }}`, "it renders more than 1024 bytes"},
		{"{{ with print .RunID .RunID }}" + strings.Repeat("{{ with print . . }}", 40) + "{{ . }}" + strings.Repeat("{{ end }}", 41), "at most 65536"},
	} {
		s := Spec{Name: "report", Output: tc.tmpl}
		if got, err := s.OutputKey(at); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %q, %v; want an error saying %q", tc.tmpl, got, err, tc.want)
		}
	}
}

// TestSpec_Validate_RefusesUnboundedTemplates: validate and apply refuse
// a template that could stall a server, whatever time it is rendered
// for, naming the field and the place in the template.
func TestSpec_Validate_RefusesUnboundedTemplates(t *testing.T) {
	key := Spec{Name: "late", Schedules: []string{"@daily"}, Shell: "true",
		Output: `c/{{if eq .Scheduled.Day 31}}x{{else}}{{range 300000000}}{{end}}y{{end}}.txt`}
	if err := key.Validate(Limits{}); err == nil || !strings.Contains(err.Error(), "output: output template: line 1, column 39: range is not allowed") {
		t.Errorf("output: %v; want the range refused at its place", err)
	}
	body := Spec{Name: "hook", Schedules: []string{"@daily"}, HTTP: &HTTP{URL: "http://127.0.0.1:9/x", Method: "POST", Body: `{{range 100000000000}}{{end}}`}}
	if err := body.Validate(Limits{}); err == nil || !strings.Contains(err.Error(), "http.body: body template: line 1, column 1: range is not allowed") {
		t.Errorf("body: %v; want the range refused at its place", err)
	}
	big := Spec{Name: "hook", Schedules: []string{"@daily"}, HTTP: &HTTP{URL: "http://127.0.0.1:9/x", Method: "POST",
		Body: `{{ with print "` + strings.Repeat("x", 60000) + `" }}` + strings.Repeat(`{{ print . }}`, 20) + `{{ end }}`}}
	if _, err := big.HTTPBody(time.Now()); !errors.Is(err, ErrTemplateBound) || !strings.Contains(err.Error(), "functions make more than 1048576 bytes") {
		t.Errorf("a body whose functions make over a MiB: %v; want ErrTemplateBound", err)
	}
	long := Spec{Name: "hook", Schedules: []string{"@daily"}, HTTP: &HTTP{URL: "http://127.0.0.1:9/x", Method: "POST", Body: strings.Repeat("x", MaxTemplateBytes+1)}}
	if err := long.Validate(Limits{}); err == nil || !strings.Contains(err.Error(), "a template is at most 65536") {
		t.Errorf("a body template over MaxTemplateBytes: %v; want it refused", err)
	}
}
