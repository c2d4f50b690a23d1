package wire

import (
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/fencecron/fencecron/jobs/jobstest"
	"github.com/fencecron/fencecron/jobs/specjson"
)

// inPieces is body as a reader that returns it in pieces of random
// sizes, as a request's body arrives.
type inPieces struct {
	b []byte
	r *rand.Rand
}

func (p *inPieces) Read(b []byte) (int, error) {
	if len(p.b) == 0 {
		return 0, io.EOF
	}
	n := copy(b[:min(len(b), 1+p.r.IntN(4096))], p.b)
	p.b = p.b[n:]
	return n, nil
}

// A body read as it arrives, with any count, decodes to what
// DecodeJobSetRequest decodes it to, or is refused where it is; a plain
// one is decoded by the stream itself.
func TestReadJobSetRequest_AsDecodeJobSetRequest(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	large, err := json.Marshal(JobSetRequest{Source: "large", Jobs: jobstest.Daily(5000)})
	if err != nil {
		t.Fatal(err)
	}
	bodies := append(jobSetBodies(t), string(large), string(large)+" \n",
		strings.Replace(string(large), `"name":"job-004000"`, `"name": "job-004000"`, 1))
	streamed := 0
	for i, body := range bodies {
		want, wantErr := DecodeJobSetRequest([]byte(body))
		count := []int{1, len(want.Jobs), 2*len(want.Jobs) + 1}[i%3]
		got, err := ReadJobSetRequest(&inPieces{[]byte(body), r}, count)
		if (err != nil) != (wantErr != nil) || err != nil && !strings.HasPrefix(err.Error(), "decode job set: ") {
			t.Fatalf("%.200s:\n error %v; DecodeJobSetRequest's %v", body, err, wantErr)
		}
		if err == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%.200s:\n got %#v\nwant %#v", body, got, want)
		}
		d := jobSetStream{stream: specjson.NewStream(nil, 0)}
		d.feed([]byte(body))
		if _, ok := d.result(); ok {
			streamed++
		}
	}
	if streamed < len(bodies)/3 {
		t.Errorf("%d of %d bodies decoded as they arrived: the test no longer exercises the stream", streamed, len(bodies))
	}
	// A request cut short says so as a read, not a decode: net/http's
	// body says io.ErrUnexpectedEOF where the client stopped early.
	for _, cut := range []error{errors.New("connection reset"), io.ErrUnexpectedEOF} {
		_, err = ReadJobSetRequest(io.MultiReader(strings.NewReader(string(large[:300_000])), iotest.ErrReader(cut)), 5000)
		if !errors.Is(err, cut) || !strings.HasPrefix(err.Error(), "read job set: ") {
			t.Errorf("a body cut by %q: %v; want the read's error", cut, err)
		}
	}
}
