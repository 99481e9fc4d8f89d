package sandbox

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/node-manager/node-manager/templates"
)

// The protocol between the server and a worker, over the worker's stdin
// and stdout: every message is a frame, a 4-byte big-endian length and
// that many bytes. The first frame the server sends is a setup (JSON);
// then each request (JSON) names templates, and each of them is answered
// by one response (a tag byte, then the output or a JSON error), in order,
// as soon as it has rendered. A worker that retires answers no template
// after the one it retires on.

// maxFrame bounds what either side reads: a render's output is at most
// templates.MaxOutputBytes, and everything else is far smaller, so a
// worker cannot make the server allocate more than this per response.
const maxFrame = templates.MaxOutputBytes + 1<<20

// maxErrorMessage bounds an error's message in a response; a template
// can put anything into its error (fail, required).
const maxErrorMessage = 16 << 10

// setup is the first frame: what every render of this worker shares.
type setup struct {
	Library map[string]string `json:"library"`
	// Memory is the worker's data limit in bytes.
	Memory int64 `json:"memory"`
	// CPU and Timeout bound each request.
	CPU     time.Duration `json:"cpu"`
	Timeout time.Duration `json:"timeout"`
}

// request renders each of Templates, in order, with the values last sent.
// Values is set when they differ from the previous request's. A group's
// NodeGroupConfigurations are one request: a round trip each was most of
// what the sandbox added to a full render.
type request struct {
	Templates []templates.NamedText `json:"templates"`
	Values    json.RawMessage       `json:"values,omitempty"`
}

// Response tags.
const (
	tagOutput byte = iota + 1
	tagError
	// tagErrorRetire is an error after which the worker exits: a render
	// that ran out of time may have left a goroutine running.
	tagErrorRetire
)

func writeFrame(w io.Writer, payload ...[]byte) error {
	n := 0
	for _, p := range payload {
		n += len(p)
	}
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(n))
	if _, err := w.Write(hdr[:]); err != nil {
		return err
	}
	for _, p := range payload {
		if _, err := w.Write(p); err != nil {
			return err
		}
	}
	return nil
}

func readFrame(r io.Reader) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > maxFrame {
		return nil, fmt.Errorf("a frame of %d bytes is larger than %d", n, maxFrame)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, err
	}
	return buf, nil
}
