package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"golang.org/x/sync/errgroup"

	"github.com/fencecron/fencecron/jobs"
)

// A job set may be split over many files: `fencecron apply DIR`, and a
// node's jobs_dir. Each file is parsed on its own, so every problem keeps
// its own file:line:column, and then the files are joined: a job name
// defined in two files is reported at both places. Nothing is applied
// unless every file is valid.

// MaxJobFiles bounds the files one directory of jobs may hold.
const MaxJobFiles = 10000

// JobFiles is a job set read from several files.
type JobFiles struct {
	// Jobs are every file's jobs, validated and normalized: the files in
	// the order read, each in its own order.
	Jobs []jobs.Spec
	// Files are the files read.
	Files []string
	// Warnings are what the files hold that is wrong but allowed.
	Warnings []Problem
}

// IsJobFile reports whether a directory entry named name is read as a
// file of jobs: *.yaml or *.yml, not hidden (editors' swap and backup
// files are).
func IsJobFile(name string) bool {
	ext := filepath.Ext(name)
	return !strings.HasPrefix(name, ".") && (ext == ".yaml" || ext == ".yml")
}

// JobFilesIn lists the job files of dir in name order (not those of its
// sub-directories). A directory without any is an error: applying it
// would remove every job.
func JobFilesIn(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range entries {
		if e.Type().IsRegular() && IsJobFile(e.Name()) {
			files = append(files, filepath.Join(dir, e.Name()))
		}
	}
	switch {
	case len(files) == 0:
		return nil, fmt.Errorf("%s holds no job files (*.yaml, *.yml): applying it would remove every job; apply a file with `jobs: []` to mean that", dir)
	case len(files) > MaxJobFiles:
		return nil, fmt.Errorf("%s holds %d job files: at most %d", dir, len(files), MaxJobFiles)
	}
	return files, nil
}

// LoadJobFiles reads and checks files of jobs, several at once, and joins
// them. Each may hold a jobs section only. It returns *Error listing
// every problem of every file, each at its own position, or the joined
// set.
func LoadJobFiles(paths []string) (*JobFiles, error) {
	files, err := loadJobFiles(paths)
	if err != nil {
		return nil, err
	}
	return joinJobs(files...)
}

// loadJobFiles parses files of jobs, each checked on its own.
func loadJobFiles(paths []string) ([]*File, error) {
	parsed := make([]*File, len(paths))
	errs := make([]error, len(paths))
	// Parse on every core: a file's parse is independent of the others'.
	var g errgroup.Group
	g.SetLimit(runtime.GOMAXPROCS(0))
	for i, p := range paths {
		g.Go(func() error {
			parsed[i], errs[i] = Load(p)
			return nil
		})
	}
	g.Wait()
	all := &Error{}
	for i, err := range errs {
		var cerr *Error
		switch {
		case errors.As(err, &cerr):
			all.Problems = append(all.Problems, cerr.Problems...)
		case err != nil:
			all.Problems = append(all.Problems, Problem{Pos: Pos{File: paths[i]}, Msg: err.Error()})
		default:
			all.Problems = append(all.Problems, jobsOnly(parsed[i])...)
		}
	}
	if len(all.Problems) > 0 {
		return nil, all
	}
	return parsed, nil
}

// jobsOnly reports the sections other than jobs of a file of jobs.
func jobsOnly(f *File) []Problem {
	var out []Problem
	for _, s := range []string{SectionNode, SectionCluster, SectionStore, SectionAPI, SectionNotify} {
		if f.Has(s) {
			out = append(out, Problem{Pos: Pos{File: f.Name}, Path: s,
				Msg: "a file of jobs holds a jobs section only; the node's own settings belong in its config file"})
		}
	}
	return out
}

// joinJobs joins the jobs of files, each already checked on its own; a
// name defined in two files is a problem reported at both.
func joinJobs(files ...*File) (*JobFiles, error) {
	n := 0
	for _, f := range files {
		n += len(f.Jobs)
	}
	set := &JobFiles{Jobs: make([]jobs.Spec, 0, n)}
	type place struct {
		pos  Pos
		path string
	}
	first := make(map[string]place, n)
	var probs []Problem
	for _, f := range files {
		set.Files = append(set.Files, f.Name)
		set.Warnings = append(set.Warnings, f.Warnings...)
		for i, s := range f.Jobs {
			at := place{f.jobPos[i], fmt.Sprintf("jobs[%d].name", i)}
			if prev, dup := first[s.Name]; dup {
				probs = append(probs,
					Problem{Pos: at.pos, Path: at.path, Msg: fmt.Sprintf("%q is already the name of the job at %s", s.Name, prev.pos)},
					Problem{Pos: prev.pos, Path: prev.path, Msg: fmt.Sprintf("%q is the name of the job at %s too", s.Name, at.pos)})
				continue
			}
			first[s.Name] = at
			set.Jobs = append(set.Jobs, s)
		}
	}
	for _, p := range jobs.CheckAfter(set.Jobs) {
		at := first[p.Job]
		probs = append(probs, Problem{Pos: at.pos, Path: strings.TrimSuffix(at.path, ".name") + fmt.Sprintf(".after[%d]", p.Index), Msg: p.Msg})
	}
	if len(set.Jobs) > jobs.MaxJobs {
		probs = append(probs, Problem{Pos: Pos{File: strings.Join(set.Files, ", ")}, Msg: fmt.Sprintf("%d jobs: a job set holds at most %d", len(set.Jobs), jobs.MaxJobs)})
	}
	if len(probs) > 0 {
		slices.SortStableFunc(probs, func(a, b Problem) int {
			if c := strings.Compare(a.File, b.File); c != 0 {
				return c
			}
			return a.Line - b.Line
		})
		return nil, &Error{Problems: probs}
	}
	return set, nil
}

// JobsDirPath returns node.jobs_dir as a path: relative to the directory
// of the config file unless absolute; "" if unset.
func (f *File) JobsDirPath() string {
	if f.Node.JobsDir == "" || filepath.IsAbs(f.Node.JobsDir) {
		return f.Node.JobsDir
	}
	return filepath.Join(filepath.Dir(f.Name), f.Node.JobsDir)
}

// NodeJobs returns a node's whole job set: its config file's jobs, joined
// with those of its jobs_dir if it has one (every file read anew). The
// config file's jobs come first.
func (f *File) NodeJobs() (*JobFiles, error) {
	dir := f.JobsDirPath()
	if dir == "" {
		return joinJobs(f)
	}
	paths, err := JobFilesIn(dir)
	if err != nil {
		return nil, fmt.Errorf("%s: node.jobs_dir: %w", f.Name, err)
	}
	files, err := loadJobFiles(paths)
	if err != nil {
		return nil, err
	}
	return joinJobs(append([]*File{f}, files...)...)
}
