package pages

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// describeSchedule says a schedule expression in words, e.g.
// "*/5 * * * * *" → "every 5 seconds", "0 9 * * 1-5" → "at 09:00, Monday
// through Friday". It reads the syntax the jobs package accepts (5 or 6
// fields, descriptors, @every); for anything it cannot put well it
// returns the field-by-field reading, never an error.
func describeSchedule(expr string) string {
	expr = strings.TrimSpace(expr)
	if d, ok := strings.CutPrefix(expr, "@every "); ok {
		dur, err := time.ParseDuration(strings.TrimSpace(d))
		if err != nil {
			return expr
		}
		return "every " + durationWords(dur)
	}
	switch expr {
	case "@yearly", "@annually":
		return "every year at 00:00 on 1 January"
	case "@monthly":
		return "every month at 00:00 on day 1"
	case "@weekly":
		return "every week at 00:00 on Sunday"
	case "@daily", "@midnight":
		return "every day at 00:00"
	case "@hourly":
		return "every hour, on the hour"
	}
	f := strings.Fields(expr)
	switch len(f) {
	case 5:
		f = append([]string{"0"}, f...)
	case 6:
	default:
		return expr
	}
	sec, min, hour, dom, mon, dow := f[0], f[1], f[2], f[3], f[4], f[5]

	var when string
	switch {
	case isNum(sec) && isNum(min) && isNum(hour):
		when = "at " + clock(hour, min, sec)
	case isNum(sec) && isNum(min) && isNumList(hour):
		var times []string
		for _, h := range strings.Split(hour, ",") {
			times = append(times, clock(h, min, sec))
		}
		when = "at " + joinWords(times)
	case sec == "*" && min == "*" && hour == "*":
		when = "every second"
	case step(sec) != "" && min == "*" && hour == "*":
		when = "every " + plural(step(sec), "second")
	case sec == "0" && min == "*" && hour == "*":
		when = "every minute"
	case sec == "0" && step(min) != "" && hour == "*":
		when = "every " + plural(step(min), "minute")
	case sec == "0" && isNum(min) && hour == "*":
		when = "every hour at minute " + min
	case sec == "0" && isNum(min) && step(hour) != "":
		when = "every " + plural(step(hour), "hour") + " at minute " + min
	default:
		var parts []string
		for _, p := range []struct{ v, unit string }{{sec, "second"}, {min, "minute"}, {hour, "hour"}} {
			if p.v != "*" && !(p.unit == "second" && p.v == "0") {
				parts = append(parts, fieldWords(p.v, p.unit, nil))
			}
		}
		when = strings.Join(parts, ", ")
	}
	var days []string
	if dom != "*" && dom != "?" {
		days = append(days, "on "+fieldWords(dom, "day", nil)+" of the month")
	}
	if dow != "*" && dow != "?" {
		days = append(days, "on "+fieldWords(dow, "", weekdays))
	}
	if mon != "*" {
		days = append(days, "in "+fieldWords(mon, "", months))
	}
	if len(days) == 0 {
		if strings.HasPrefix(when, "at ") {
			return "every day " + when
		}
		return when
	}
	return when + ", " + strings.Join(days, ", ")
}

var weekdays = []string{"Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"}
var months = []string{"", "January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December"}

func isNum(s string) bool {
	_, err := strconv.Atoi(s)
	return err == nil
}

func isNumList(s string) bool {
	for _, p := range strings.Split(s, ",") {
		if !isNum(p) {
			return false
		}
	}
	return true
}

// step returns n for "*/n", else "".
func step(s string) string {
	n, ok := strings.CutPrefix(s, "*/")
	if !ok || !isNum(n) {
		return ""
	}
	return n
}

func plural(n, unit string) string {
	if n == "1" {
		return unit
	}
	return n + " " + unit + "s"
}

func clock(h, m, s string) string {
	hh, _ := strconv.Atoi(h)
	mm, _ := strconv.Atoi(m)
	ss, _ := strconv.Atoi(s)
	if ss == 0 {
		return fmt.Sprintf("%02d:%02d", hh, mm)
	}
	return fmt.Sprintf("%02d:%02d:%02d", hh, mm, ss)
}

// fieldWords reads one field: lists, ranges, steps; names maps numbers
// to words (weekdays, months) when given.
func fieldWords(v, unit string, names []string) string {
	name := func(s string) string {
		if n, err := strconv.Atoi(s); err == nil && names != nil && n >= 0 && n < len(names) && names[n] != "" {
			return names[n]
		}
		if names != nil {
			return strings.ToUpper(s[:1]) + strings.ToLower(s[1:])
		}
		return s
	}
	var items []string
	for _, part := range strings.Split(v, ",") {
		base, stepBy, hasStep := strings.Cut(part, "/")
		var item string
		switch lo, hi, isRange := strings.Cut(base, "-"); {
		case base == "*" || base == "?":
			item = "every " + unit
			if hasStep {
				item = "every " + plural(stepBy, unit)
			}
			hasStep = false
		case isRange:
			item = name(lo) + " through " + name(hi)
		default:
			item = name(base)
		}
		if hasStep {
			item += " every " + plural(stepBy, strings.TrimSuffix(unit, "s"))
		}
		items = append(items, item)
	}
	out := joinWords(items)
	if unit != "" && !strings.HasPrefix(out, "every ") {
		out = unit + " " + out
	}
	return out
}

func joinWords(items []string) string {
	switch len(items) {
	case 0:
		return ""
	case 1:
		return items[0]
	}
	return strings.Join(items[:len(items)-1], ", ") + " and " + items[len(items)-1]
}

// durationWords says a whole duration: "90 seconds" → "1 minute 30 seconds".
func durationWords(d time.Duration) string {
	if d <= 0 {
		return d.String()
	}
	var parts []string
	for _, u := range []struct {
		d    time.Duration
		name string
	}{{24 * time.Hour, "day"}, {time.Hour, "hour"}, {time.Minute, "minute"}, {time.Second, "second"}} {
		if n := d / u.d; n == 1 {
			parts = append(parts, "1 "+u.name)
			d -= n * u.d
		} else if n > 1 {
			parts = append(parts, plural(strconv.Itoa(int(n)), u.name))
			d -= n * u.d
		}
	}
	if d > 0 {
		parts = append(parts, d.String())
	}
	if len(parts) == 1 && strings.HasPrefix(parts[0], "1 ") {
		return strings.TrimPrefix(parts[0], "1 ")
	}
	return strings.Join(parts, " ")
}
