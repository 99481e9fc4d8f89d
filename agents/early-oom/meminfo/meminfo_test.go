package meminfo

import (
	"os"
	"path/filepath"
	"testing"
)

func TestReadAvailableInBytes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "meminfo")
	data := "MemTotal:       16303548 kB\nMemFree:          512000 kB\nMemAvailable:    1048576 kB\nBuffers:          100 kB\n"
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := ReadAvailable(path)
	if err != nil || got != 1<<30 {
		t.Errorf("got %d, %v; want %d", got, err, 1<<30)
	}
}

func TestParseAvailableRefusesWhatItCannotRead(t *testing.T) {
	for _, data := range []string{
		"MemTotal: 1 kB\n",
		"MemAvailable: 12\n",
		"MemAvailable: 12 MB\n",
		"MemAvailable: -1 kB\n",
		"MemAvailable: x kB\n",
	} {
		if v, err := ParseAvailable([]byte(data)); err == nil {
			t.Errorf("ParseAvailable(%q) = %d; want an error", data, v)
		}
	}
}
