package pages

import "testing"

func TestDescribeSchedule(t *testing.T) {
	for _, tt := range []struct{ expr, want string }{
		{"*/5 * * * * *", "every 5 seconds"},
		{"* * * * * *", "every second"},
		{"@every 30s", "every 30 seconds"},
		{"@every 90s", "every 1 minute 30 seconds"},
		{"@every 1h", "every hour"},
		{"@every 6h", "every 6 hours"},
		{"@daily", "every day at 00:00"},
		{"@hourly", "every hour, on the hour"},
		{"0 0 9 1 * *", "at 09:00, on day 1 of the month"},
		{"30 2 * * *", "every day at 02:30"},
		{"0 9 * * 1-5", "at 09:00, on Monday through Friday"},
		{"*/15 * * * *", "every 15 minutes"},
		{"* * * * *", "every minute"},
		{"5 * * * *", "every hour at minute 5"},
		{"0 */2 * * *", "every 2 hours at minute 0"},
		{"0 0 1 1 *", "at 00:00, on day 1 of the month, in January"},
		{"0 8,12,18 * * sat,sun", "at 08:00, 12:00 and 18:00, on Sat and Sun"},
		{"0 10-20 * * *", "minute 0, hour 10 through 20"},
		{"not a schedule", "not a schedule"},
	} {
		if got := describeSchedule(tt.expr); got != tt.want {
			t.Errorf("describeSchedule(%q) = %q, want %q", tt.expr, got, tt.want)
		}
	}
}
