package psi

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

const sample = "some avg10=12.50 avg60=3.00 avg300=0.75 total=987654\nfull avg10=7.25 avg60=1.00 avg300=0.10 total=12345\n"

func TestReadParsesBothLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "memory")
	if err := os.WriteFile(path, []byte(sample), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	want := Pressure{Some: Averages{12.5, 3, 0.75, 987654}, Full: Averages{7.25, 1, 0.1, 12345}}
	if p != want {
		t.Errorf("got %+v, want %+v", p, want)
	}
}

func TestMissingFileIsUnavailableNotAnError(t *testing.T) {
	_, err := Read(filepath.Join(t.TempDir(), "pressure", "memory"))
	if !errors.Is(err, ErrUnavailable) {
		t.Errorf("a missing PSI file gives %v; want ErrUnavailable", err)
	}
}

func TestUnreadableFileIsAnErrorNotUnavailable(t *testing.T) {
	// A directory where the file should be: EISDIR, a fault to report,
	// not a kernel without PSI.
	_, err := Read(t.TempDir())
	if err == nil || errors.Is(err, ErrUnavailable) {
		t.Errorf("reading a directory gives %v; want an error other than ErrUnavailable", err)
	}
}

func TestParseRefusesMalformedFiles(t *testing.T) {
	for name, data := range map[string]string{
		"empty":          "",
		"no full line":   "some avg10=1.00 avg60=0.00 avg300=0.00 total=1\n",
		"no some line":   "full avg10=1.00 avg60=0.00 avg300=0.00 total=1\n",
		"bad number":     "some avg10=x avg60=0.00 avg300=0.00 total=1\nfull avg10=1.00 avg60=0.00 avg300=0.00 total=1\n",
		"over 100":       "some avg10=100.01 avg60=0 avg300=0 total=1\nfull avg10=1 avg60=0 avg300=0 total=1\n",
		"no avg10":       "some avg60=0 avg300=0 total=1\nfull avg10=1 avg60=0 avg300=0 total=1\n",
		"unknown line":   "some avg10=1 total=1\nfull avg10=1 total=1\nhalf avg10=1\n",
		"not key=value":  "some avg10 1\nfull avg10=1\n",
		"negative total": "some avg10=1 total=-1\nfull avg10=1 total=1\n",
	} {
		if _, err := Parse([]byte(data)); err == nil {
			t.Errorf("%s: Parse accepted %q", name, data)
		}
	}
}

func TestParseIgnoresUnknownFields(t *testing.T) {
	p, err := Parse([]byte("some avg10=2.00 avg60=0 avg300=0 total=1 avg1=9\nfull avg10=1.00 avg60=0 avg300=0 total=1\n"))
	if err != nil || p.Some.Avg10 != 2 || p.Full.Avg10 != 1 {
		t.Errorf("got %+v, %v", p, err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(sample))
	f.Add([]byte("some avg10=0.00\nfull avg10=0.00\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data)
		if err != nil {
			return
		}
		for _, v := range []float64{p.Some.Avg10, p.Full.Avg10, p.Some.Avg60, p.Full.Avg300} {
			if v < 0 || v > 100 {
				t.Fatalf("Parse(%q) accepted %v as a percentage", data, v)
			}
		}
	})
}
