package localcluster

import (
	"io/fs"
	"path/filepath"
)

// DirSize is the size of the files under dir: how much a node's data
// directory holds, which the scale measurements compare before and after
// an apply.
func DirSize(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err == nil {
			n += info.Size()
		}
		return err
	})
	return n, err
}
