package checksums

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
)

func TestWantFollowsServedChecksums(t *testing.T) {
	b := func(name, sum string) *bashiblev1alpha1.NodeGroupBundle {
		o := &bashiblev1alpha1.NodeGroupBundle{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if sum != "" {
			o.Annotations = map[string]string{bashiblev1alpha1.ChecksumAnnotation: sum}
		}
		return o
	}
	got := Want([]*bashiblev1alpha1.NodeGroupBundle{b("master", "aa"), b("worker", "bb"), b("new", "")})
	if len(got) != 2 || string(got["master"]) != "aa" || string(got["worker"]) != "bb" {
		t.Errorf("Want = %v; want the two groups that have a checksum", got)
	}
}
