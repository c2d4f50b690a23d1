// Package config reads fencecron's YAML config file: the node, the cluster,
// the store and the jobs.
package config

import (
	"bytes"
	"fmt"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/fencecron/fencecron/jobs"
)

// File is the whole config file.
type File struct {
	Jobs []Job `yaml:"jobs"`
}

// Job is one entry of the jobs section, as written.
type Job struct {
	Name           string            `yaml:"name"`
	Schedule       string            `yaml:"schedule"`
	Schedules      []string          `yaml:"schedules"`
	Timezone       string            `yaml:"timezone"`
	Command        []string          `yaml:"command"`
	Shell          string            `yaml:"shell"`
	Env            map[string]string `yaml:"env"`
	Dir            string            `yaml:"dir"`
	Output         string            `yaml:"output"`
	Timeout        time.Duration     `yaml:"timeout"`
	LeaseTTL       time.Duration     `yaml:"lease_ttl"`
	Retries        int               `yaml:"retries"`
	Backoff        time.Duration     `yaml:"backoff"`
	Overlap        string            `yaml:"overlap"`
	Misfire        string            `yaml:"misfire"`
	CatchupWindow  time.Duration     `yaml:"catchup_window"`
	Target         map[string]string `yaml:"target"`
	MaxOutputBytes int64             `yaml:"max_output_bytes"`
	Paused         bool              `yaml:"paused"`
	Jitter         time.Duration     `yaml:"jitter"`
}

// Parse reads a config file's bytes; name is used in error messages.
func Parse(name string, data []byte) (*File, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var f File
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return &f, nil
}

// Specs returns the jobs as validated, normalized specs.
func (f *File) Specs() ([]jobs.Spec, error) {
	seen := map[string]bool{}
	var out []jobs.Spec
	for _, j := range f.Jobs {
		s := jobs.Spec{
			Name: j.Name, Schedules: j.Schedules, Timezone: j.Timezone,
			Command: j.Command, Shell: j.Shell, Env: j.Env, Dir: j.Dir, Output: j.Output,
			Timeout: jobs.Duration(j.Timeout), LeaseTTL: jobs.Duration(j.LeaseTTL),
			Retries: j.Retries, Backoff: jobs.Duration(j.Backoff),
			Overlap: j.Overlap, Misfire: j.Misfire, CatchupWindow: jobs.Duration(j.CatchupWindow),
			Target: j.Target, MaxOutputBytes: j.MaxOutputBytes, Paused: j.Paused, Jitter: jobs.Duration(j.Jitter),
		}
		if j.Schedule != "" {
			s.Schedules = append([]string{j.Schedule}, s.Schedules...)
		}
		s.Normalize()
		if s.Name == "" {
			return nil, fmt.Errorf("job without a name")
		}
		if seen[s.Name] {
			return nil, fmt.Errorf("job %s: defined twice", s.Name)
		}
		seen[s.Name] = true
		if _, err := jobs.ParseSchedule(s.Schedules, s.Timezone); err != nil {
			return nil, fmt.Errorf("job %s: %w", s.Name, err)
		}
		if len(s.Argv()) == 0 {
			return nil, fmt.Errorf("job %s: no command or shell", s.Name)
		}
		out = append(out, s)
	}
	return out, nil
}
