package bundles

import (
	"encoding/json"
	"strings"
	"unique"
)

// Script is a script held as pieces, each a canonical copy shared by every
// Script that holds the same piece.
//
// Every group's bashible.sh is about 128 KB, and the groups' differ in a
// few lines (the group's name, its approval mode, its endpoints): held
// whole, 100 groups kept 12.8 MB of copies of the same node library. Held
// as pieces, the lines they have in common are held once. Pieces end at
// content-defined places (after a line whose hash says so), so that a
// difference early in a script does not shift every later boundary: two
// scripts that differ in one line share every piece but the one or two
// around it.
//
// The zero Script is the empty script. A Script is immutable; String
// joins the pieces into a new string each time it is called, so a caller
// that keeps the whole script keeps a copy of its own.
type Script struct {
	pieces []unique.Handle[string]
	size   int
}

const (
	// pieceMask cuts a piece after about one line in 32 (2–3 KB of shell),
	// once it holds minPiece bytes: runs of equal lines (blank ones) whose
	// hash happens to cut do not make a piece each.
	pieceMask = 31
	minPiece  = 512
	// maxPiece bounds a piece: a script without line breaks, or with few
	// boundaries, is cut at the first line break past this size.
	maxPiece = 16 << 10
)

// NewScript holds s as pieces.
func NewScript(s string) Script {
	if s == "" {
		return Script{}
	}
	var pieces []unique.Handle[string]
	start := 0
	for i := 0; i < len(s); {
		end := strings.IndexByte(s[i:], '\n')
		if end < 0 {
			break
		}
		end += i + 1 // just past the line break
		if n := end - start; (n >= minPiece && lineEndsPiece(s[i:end])) || n >= maxPiece {
			pieces = append(pieces, unique.Make(s[start:end]))
			start = end
		}
		i = end
	}
	if start < len(s) {
		pieces = append(pieces, unique.Make(s[start:]))
	}
	return Script{pieces: pieces, size: len(s)}
}

// lineEndsPiece decides, from the line alone, whether a piece ends after it.
// The hash is 32-bit FNV-1a.
func lineEndsPiece(line string) bool {
	h := uint32(2166136261)
	for i := 0; i < len(line); i++ {
		h ^= uint32(line[i])
		h *= 16777619
	}
	return h&pieceMask == 0
}

// String is the whole script, in a new string.
func (s Script) String() string {
	switch len(s.pieces) {
	case 0:
		return ""
	case 1:
		return s.pieces[0].Value()
	}
	var b strings.Builder
	b.Grow(s.size)
	for _, p := range s.pieces {
		b.WriteString(p.Value())
	}
	return b.String()
}

// Len is the script's length in bytes.
func (s Script) Len() int { return s.size }

// Equal reports whether two Scripts hold the same script. Pieces are
// canonical and cut from the content alone, so equal scripts have equal
// pieces, compared as pointers.
func (s Script) Equal(o Script) bool {
	if s.size != o.size || len(s.pieces) != len(o.pieces) {
		return false
	}
	for i := range s.pieces {
		if s.pieces[i] != o.pieces[i] {
			return false
		}
	}
	return true
}

// MarshalJSON encodes the script as the JSON string of its text.
func (s Script) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// UnmarshalJSON decodes the JSON string of a script's text.
func (s *Script) UnmarshalJSON(data []byte) error {
	var text string
	if err := json.Unmarshal(data, &text); err != nil {
		return err
	}
	*s = NewScript(text)
	return nil
}
