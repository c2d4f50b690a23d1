package atomicfile

import (
	"syscall"
	"unsafe"
)

// hugePage is the size of the pages adviseHuge asks for.
const hugePage = 2 << 20

// adviseHuge asks the kernel to back the whole 2 MiB pages inside b with
// huge pages, before anything touches them: it helps memory the process
// has not used before (the runtime clears reused memory, touching it,
// when it hands it out). Only advice: where the kernel has none to give,
// or b holds less than two huge pages, nothing changes. b stays memory
// the garbage collector owns.
func adviseHuge(b []byte) {
	if len(b) < 2*hugePage {
		return
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	lo := int((p+hugePage-1)&^(hugePage-1) - p)
	hi := int((p+uintptr(len(b)))&^(hugePage-1) - p)
	syscall.Madvise(b[lo:hi], syscall.MADV_HUGEPAGE)
}
