package checksums

import (
	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
)

// Want is the Secret data for the served bundles.
func Want(bundles []*bashiblev1alpha1.NodeGroupBundle) map[string][]byte {
	want := map[string][]byte{}
	for _, b := range bundles {
		if sum := b.Annotations[bashiblev1alpha1.ChecksumAnnotation]; sum != "" {
			want[b.Name] = []byte(sum)
		}
	}
	return want
}
