package gossipkey

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

func TestLoad(t *testing.T) {
	k1, k2 := New(), New()
	for _, tc := range []struct {
		name    string
		files   map[string][]byte
		want    Keys
		wantErr string
	}{
		{name: "no primary", files: map[string][]byte{}, wantErr: "primary"},
		{name: "empty primary", files: map[string][]byte{deckhousev1.FencingGossipKeyPrimary: {}}, wantErr: "0 bytes"},
		{name: "short primary", files: map[string][]byte{deckhousev1.FencingGossipKeyPrimary: k1[:16]}, wantErr: "16 bytes"},
		{name: "primary", files: map[string][]byte{deckhousev1.FencingGossipKeyPrimary: k1}, want: Keys{Primary: k1}},
		{name: "next", files: map[string][]byte{deckhousev1.FencingGossipKeyPrimary: k1, deckhousev1.FencingGossipKeyNext: k2}, want: Keys{Primary: k1, Other: k2}},
		{name: "previous", files: map[string][]byte{deckhousev1.FencingGossipKeyPrimary: k2, deckhousev1.FencingGossipKeyPrevious: k1}, want: Keys{Primary: k2, Other: k1}},
		{name: "both", files: map[string][]byte{deckhousev1.FencingGossipKeyPrimary: k1, deckhousev1.FencingGossipKeyNext: k2, deckhousev1.FencingGossipKeyPrevious: k2}, wantErr: "both"},
		{name: "bad next", files: map[string][]byte{deckhousev1.FencingGossipKeyPrimary: k1, deckhousev1.FencingGossipKeyNext: []byte("x")}, wantErr: "next is 1 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, v := range tc.files {
				if err := os.WriteFile(filepath.Join(dir, name), v, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			got, err := Load(dir)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Load = %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !got.Equal(tc.want) {
				t.Fatalf("Load = %v, %v", got, err)
			}
			fromData, err := FromData(tc.files)
			if err != nil || !fromData.Equal(got) {
				t.Fatalf("FromData = %v, %v; Load gave %v", fromData, err, got)
			}
		})
	}
}

func TestFingerprintNamesTheKeyringNotTheKeys(t *testing.T) {
	k1, k2 := New(), New()
	fps := map[string]bool{}
	for _, k := range []Keys{{Primary: k1}, {Primary: k2}, {Primary: k1, Other: k2}, {Primary: k2, Other: k1}} {
		fp := k.Fingerprint()
		if len(fp) != 16 || fps[fp] {
			t.Fatalf("fingerprint %q of %d hex digits, seen before %v", fp, len(fp), fps[fp])
		}
		fps[fp] = true
		for _, key := range k.All() {
			if bytes.Contains([]byte(fp), key) || strings.Contains(fp, string(key[:4])) {
				t.Fatal("the fingerprint holds key material")
			}
		}
	}
}
