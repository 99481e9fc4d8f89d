package objectname

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	valid := map[string]string{
		"worker": "worker", "ubuntu-lts.worker": "worker", "centos.a-1": "a-1",
		strings.Repeat("a", 42): strings.Repeat("a", 42),
	}
	for name, want := range valid {
		if got, err := Parse(name); err != nil || got != want {
			t.Errorf("Parse(%q) = %q, %v; want %q", name, got, err, want)
		}
	}
	for _, name := range []string{"", "Worker", "-a", "a-", "a.b.c", ".worker", "os.", "UB.worker", strings.Repeat("a", 43), "a_b", "a/b"} {
		if got, err := Parse(name); err == nil || !strings.Contains(err.Error(), "a valid name is") {
			t.Errorf("Parse(%q) = %q, %v; want an error saying what a valid name is", name, got, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"worker", "ubuntu-lts.worker", "a.b.c", "", "-", strings.Repeat("z", 50)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		group, err := Parse(name)
		if err != nil {
			return
		}
		if len(group) == 0 || len(group) > 42 || !groupNameRE.MatchString(group) || !strings.HasSuffix(name, group) {
			t.Fatalf("Parse(%q) accepted group %q", name, group)
		}
	})
}
