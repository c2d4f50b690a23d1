package wire

import (
	"bytes"
	"fmt"
	"io"
	"unsafe"

	"github.com/fencecron/fencecron/jobs"
	"github.com/fencecron/fencecron/jobs/specjson"
)

// JobCountHeader is the header of PUT /api/v1/jobset in which a client
// says how many jobs the body holds (`fencecron apply` does): the node
// then decodes the set as it arrives (ReadJobSetRequest). A wrong count
// costs time, not correctness.
const JobCountHeader = "Fencecron-Job-Count"

// ReadJobSetRequest reads the body of PUT /api/v1/jobset from r and
// decodes it as DecodeJobSetRequest does, for a client that says it sends
// count jobs. The specs are decoded as the body arrives, on another core
// than the one reading it. 100,000 jobs (some 30 MB) were read whole
// first, into twice that of memory touched for the first time, and then
// decoded on one core. A body specjson does not read is decoded whole
// once read, as DecodeJobSetRequest decodes it. An error names what
// failed: reading ("read job set: ", wrapping r's error) or decoding.
//
// The list is set aside for at most 8 MiB of specs before they arrive
// (a count is only a client's word), and for all count of them (at most
// jobs.MaxJobs, 77 MB) once those have, 3 MB of JSON at the least: what
// a body of as many names made the whole read set aside. 100,000 specs
// take 46 MB, not the 80 MB of a list grown by doubling.
func ReadJobSetRequest(r io.Reader, count int) (JobSetRequest, error) {
	count = max(count, 0)
	first := min(count, (8<<20)/int(unsafe.Sizeof(jobs.Spec{})))
	d := jobSetStream{stream: specjson.NewStream(make([]jobs.Spec, 0, first), min(count, jobs.MaxJobs))}
	kept, err := d.read(r)
	if err != nil {
		return JobSetRequest{}, fmt.Errorf("read job set: %w", err)
	}
	if req, ok := d.result(); ok {
		return req, nil
	}
	// Every block read is kept for a body the stream does not read.
	d.stream = nil
	req, err := DecodeJobSetRequest(bytes.Join(kept, nil))
	if err != nil {
		return req, fmt.Errorf("decode job set: %v", err)
	}
	return req, nil
}

// read reads r to its end (io.EOF: a body cut short is an error) in
// blocks, which it returns, while another goroutine feeds them to d.
func (d *jobSetStream) read(r io.Reader) (kept [][]byte, err error) {
	blocks := make(chan []byte, 16)
	decoded := make(chan struct{})
	go func() {
		defer close(decoded)
		for b := range blocks {
			d.feedOrGiveUp(b)
		}
	}()
	defer func() {
		close(blocks)
		<-decoded
	}()
	for {
		b := make([]byte, streamBlock)
		n := 0
		for n < len(b) && err == nil {
			var k int
			k, err = r.Read(b[n:])
			n += k
		}
		if n > 0 {
			kept = append(kept, b[:n])
			blocks <- b[:n]
		}
		if err == io.EOF {
			return kept, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// jobSetStream reads a body of PUT /api/v1/jobset in the plain shape
// DecodeJobSetRequest reads directly ({"source":"...","jobs":[...]}), a
// piece at a time; bad records that the body is not of it.
type jobSetStream struct {
	buf    []byte // what arrived and is not read yet, at its start
	head   bool   // the source is read
	source string
	stream *specjson.Stream
	ended  bool   // the list is read
	tail   []byte // what follows it
	bad    bool
}

// streamBlock is what the stream is fed at a time; maxPending bounds what
// it holds unread: a source, or one spec (at most jobs.MaxSpecBytes), and
// a block. More is not of the plain shape, and is read whole.
const (
	streamBlock = 256 << 10
	maxPending  = jobs.MaxSpecBytes + streamBlock
)

// feedOrGiveUp is feed, which gives up on the stream if it panics: the
// body is then decoded whole, in the request's goroutine, where a panic
// is answered as one.
func (d *jobSetStream) feedOrGiveUp(b []byte) {
	defer func() {
		if recover() != nil {
			d.bad = true
		}
	}()
	d.feed(b)
}

func (d *jobSetStream) feed(b []byte) {
	if d.bad {
		return
	}
	d.buf = append(d.buf, b...)
	if !d.head {
		// What follows the head is not taken from plainSourceThenJobs: it
		// cuts the trailing spaces of what it reads, here maybe a string's.
		source, _, ok := plainSourceThenJobs(d.buf)
		if !ok {
			d.bad = len(d.buf) > maxPending
			return
		}
		used := len(`{"source":"`) + len(source) + len(`","jobs":`)
		d.head, d.source = true, source
		d.buf = d.buf[:copy(d.buf, d.buf[used:])]
	}
	if !d.ended {
		n, ended, ok := d.stream.Feed(d.buf)
		d.buf = d.buf[:copy(d.buf, d.buf[n:])]
		d.ended = ended
		d.bad = !ok || len(d.buf) > maxPending
	}
	if d.ended {
		d.tail = append(d.tail, d.buf...)
		d.buf = d.buf[:0]
		d.bad = d.bad || len(d.tail) > maxPending
	}
}

// result is the request read, once the body has ended; ok is false for
// a body not of the plain shape.
func (d *jobSetStream) result() (req JobSetRequest, ok bool) {
	if d.bad || !d.ended || string(bytes.TrimRight(d.tail, " \t\r\n")) != "}" {
		return req, false
	}
	return JobSetRequest{Source: d.source, Jobs: d.stream.Specs()}, true
}
