package config

import (
	"fmt"
	"log/slog"
	"strings"
)

// Log formats and the default level (log:).
const (
	LogText          = "text"
	LogJSON          = "json"
	DefaultLogFormat = LogText
	DefaultLogLevel  = "info"
)

// Log is the log section: how this node writes its log to stderr. JSON
// is for log pipelines, which then need no parser of their own for our
// lines; text stays the default because a person reads a terminal.
type Log struct {
	// Format is text (slog's key=value lines) or json (one object a
	// line). The agent's and dev's -log-format flag overrides it.
	Format string `yaml:"format"`
	// Level is the least severe level written: debug, info, warn or
	// error.
	Level string `yaml:"level"`
}

// CheckLogFormat checks a log format, as log.format or -log-format.
func CheckLogFormat(s string) error {
	switch s {
	case LogText, LogJSON:
		return nil
	}
	return fmt.Errorf("%q: want %s or %s", clip(s, 40), LogText, LogJSON)
}

// SlogLevel is the level as slog knows it; info for one Check refused.
func (l Log) SlogLevel() slog.Level {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(l.Level)); err != nil {
		return slog.LevelInfo
	}
	return lv
}

func (d *decoder) checkLog(l *Log) {
	if err := CheckLogFormat(l.Format); err != nil && !d.failed["log.format"] {
		d.errorf(d.at("log.format"), "log.format", "%v", err)
	}
	switch strings.ToLower(l.Level) {
	case "debug", "info", "warn", "error":
	default:
		if !d.failed["log.level"] {
			d.errorf(d.at("log.level"), "log.level", "%q: want debug, info, warn or error", clip(l.Level, 40))
		}
	}
}
