// Package gossipkey is the fencing agents' gossip keyring as
// node-manager-controller keeps it, in a Secret per fenced group
// (deckhousev1.FencingGossipKeySecret), and as the agents read it, from
// that Secret mounted as files by the kubelet.
//
// The Secret holds the primary key (deckhousev1.FencingGossipKeyPrimary),
// which every agent encrypts with, and during a rotation one more key that
// agents accept: the next key (deckhousev1.FencingGossipKeyNext) while it
// is being handed out, then the previous one (FencingGossipKeyPrevious)
// once the next became primary. Each agent reports the Fingerprint of the
// keyring it uses on its Node, never a key, so the controller knows when
// every agent has the Secret's current keyring and the rotation may take
// its next step.
package gossipkey

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// KeySize is the size of every key: AES-256 (memberlist's AES-GCM).
const KeySize = 32

// Keys is a group's gossip keyring: Primary encrypts, Primary and Other
// decrypt.
type Keys struct {
	Primary []byte
	// Other is the next or the previous key during a rotation, else nil.
	Other []byte
}

// All is the keys, the primary first.
func (k Keys) All() [][]byte {
	if k.Other == nil {
		return [][]byte{k.Primary}
	}
	return [][]byte{k.Primary, k.Other}
}

// Fingerprint names the keyring without revealing a key: the first 16 hex
// digits of a SHA-256 over a fixed prefix and the keys (the keys are 256
// random bits, so the digest gives nothing away). It changes with either
// key, and with which one is primary.
func (k Keys) Fingerprint() string {
	h := sha256.New()
	h.Write([]byte("node-manager fencing gossip keyring v1\x00"))
	h.Write(k.Primary)
	h.Write([]byte{0})
	h.Write(k.Other)
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// Equal reports whether both keyrings hold the same keys alike.
func (k Keys) Equal(o Keys) bool {
	return bytes.Equal(k.Primary, o.Primary) && bytes.Equal(k.Other, o.Other)
}

// New is a fresh random key.
func New() []byte {
	key := make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		panic(fmt.Sprintf("crypto/rand failed: %v", err)) // never on Linux
	}
	return key
}

// FromData is the keyring of a Secret's data.
func FromData(data map[string][]byte) (Keys, error) {
	return parse(func(name string) ([]byte, error) {
		v, ok := data[name]
		if !ok {
			return nil, fs.ErrNotExist
		}
		return v, nil
	})
}

// Load reads the keyring from dir, the Secret as the kubelet mounts it
// (one file per key). A missing or malformed primary key is an error, and
// so is a next and a previous key at once: the agent must then refuse to
// gossip rather than gossip in the clear.
func Load(dir string) (Keys, error) {
	k, err := parse(func(name string) ([]byte, error) { return os.ReadFile(filepath.Join(dir, name)) })
	if err != nil {
		return Keys{}, fmt.Errorf("reading the gossip keyring from %s (the group's Secret, mounted by the kubelet): %w", dir, err)
	}
	return k, nil
}

func parse(read func(name string) ([]byte, error)) (Keys, error) {
	var k Keys
	primary, err := read(deckhousev1.FencingGossipKeyPrimary)
	if err != nil {
		return Keys{}, fmt.Errorf("primary key %s: %w", deckhousev1.FencingGossipKeyPrimary, err)
	}
	if len(primary) != KeySize {
		return Keys{}, fmt.Errorf("primary key %s is %d bytes, want %d", deckhousev1.FencingGossipKeyPrimary, len(primary), KeySize)
	}
	k.Primary = primary
	for _, name := range []string{deckhousev1.FencingGossipKeyNext, deckhousev1.FencingGossipKeyPrevious} {
		v, err := read(name)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			return Keys{}, fmt.Errorf("key %s: %w", name, err)
		case len(v) != KeySize:
			return Keys{}, fmt.Errorf("key %s is %d bytes, want %d", name, len(v), KeySize)
		case k.Other != nil:
			return Keys{}, fmt.Errorf("both %s and %s are set; a rotation holds one of them", deckhousev1.FencingGossipKeyNext, deckhousev1.FencingGossipKeyPrevious)
		}
		k.Other = v
	}
	return k, nil
}
