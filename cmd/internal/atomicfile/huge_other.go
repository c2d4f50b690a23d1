//go:build !linux

package atomicfile

// adviseHuge does nothing where the kernel takes no such advice.
func adviseHuge([]byte) {}
