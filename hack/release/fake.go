package release

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	infrav1alpha1 "github.com/node-manager/node-manager/apiserver/apis/infrastructure/v1alpha1"
)

// Images are the images make images builds, by the names the manifests
// give them.
var Images = []string{
	deckhousev1.BashibleAPIServerName, deckhousev1.NodeManagerControllerName, deckhousev1.CAPSControllerManagerName,
	deckhousev1.FencingAgentName, deckhousev1.EarlyOOMName, infrav1alpha1.CAPIControllerManagerName,
}

// WriteFakeDigests writes a digests file in make images' format into dir,
// with a made-up digest per image (the sha256 of its name), for the tests
// that build a release without building images; it returns its path.
func WriteFakeDigests(dir string) (string, error) {
	var b strings.Builder
	for _, name := range Images {
		sum := sha256.Sum256([]byte(name))
		fmt.Fprintf(&b, "%s sha256:%s\n", name, hex.EncodeToString(sum[:]))
	}
	path := filepath.Join(dir, "digests")
	return path, os.WriteFile(path, []byte(b.String()), 0o644)
}
