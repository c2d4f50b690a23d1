// Package atomicfile writes files whole or not at all, and reads them
// whole up to a bound.
package atomicfile

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// Read reads the file at path, at most limit bytes of it (a caller that
// refuses larger files asks for one byte more than it takes), into a
// buffer of the file's size: a file of megabytes read into one grown by
// doubling is twice the bytes for a fresh command to fault in. It returns
// the file's information too (its mode, say).
func Read(path string, limit int64) ([]byte, fs.FileInfo, error) {
	return read(path, limit, false)
}

// ReadHuge is Read for a command that reads a file of megabytes once,
// then exits: its buffer is in huge pages where the kernel gives them.
// Each 4 KiB page a process has not used before costs a fault, some 11
// µs on the machine measured: reading a 7.5 MB jobs file and passing
// over it once took 25 + 11 ms, and 5 + 1 ms in huge pages. (Not for a
// node: memory advised so stays so, and Go's runtime no longer advises
// its heap, for what huge pages cost memory reused later.)
func ReadHuge(path string, limit int64) ([]byte, fs.FileInfo, error) {
	return read(path, limit, true)
}

func read(path string, limit int64, huge bool) ([]byte, fs.FileInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	// Room past the size for ReadFrom to see the end without growing.
	b := make([]byte, 0, min(info.Size(), limit)+bytes.MinRead)
	if huge {
		adviseHuge(b[:cap(b)])
	}
	buf := bytes.NewBuffer(b)
	if _, err := buf.ReadFrom(io.LimitReader(f, limit)); err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", path, err)
	}
	return buf.Bytes(), info, nil
}

// Write replaces path with data: a reader never sees half of it.
func Write(path string, data []byte, mode os.FileMode) error {
	return WriteFunc(path, mode, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// WriteFunc replaces path with what write writes, as Write does: a file
// of megabytes need not be held whole first.
func WriteFunc(path string, mode os.FileMode, write func(io.Writer) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	err = write(tmp)
	if err == nil {
		err = tmp.Chmod(mode)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return os.Rename(tmp.Name(), path)
}
