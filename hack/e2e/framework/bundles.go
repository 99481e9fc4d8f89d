package framework

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	"github.com/node-manager/node-manager/generated/clientset/versioned"
	bashibleclient "github.com/node-manager/node-manager/generated/clientset/versioned/typed/bashible/v1alpha1"
)

// BashibleClient is the bashible.deckhouse.io client of an identity (a
// node, a bootstrap token, anonymous...).
func BashibleClient(cfg *rest.Config) bashibleclient.BashibleV1alpha1Interface {
	return versioned.NewForConfigOrDie(cfg).BashibleV1alpha1()
}

// Bundle is group's NodeGroupBundle as the aggregator serves it to the
// administrator; the test fails when it cannot be read.
func (f *Framework) Bundle(t testing.TB, group string) *bashiblev1alpha1.NodeGroupBundle {
	t.Helper()
	b, err := f.NM.BashibleV1alpha1().NodeGroupBundles().Get(Context(t), group, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get nodegroupbundles/%s: %v", group, err)
	}
	return b
}

// Checksum is the configuration checksum group's bundle is served with;
// the test fails when the group has no bundle.
func (f *Framework) Checksum(t testing.TB, group string) string {
	t.Helper()
	return f.Bundle(t, group).Annotations[bashiblev1alpha1.ChecksumAnnotation]
}

// ServedChecksum is the checksum group's bundle is served with, "" while
// the group has none.
func (f *Framework) ServedChecksum(ctx context.Context, group string) (string, error) {
	b, err := f.NM.BashibleV1alpha1().NodeGroupBundles().Get(ctx, group, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return b.Annotations[bashiblev1alpha1.ChecksumAnnotation], nil
}

// WaitChecksum waits until group is served with a checksum for which ok
// is true ("" while it has no bundle) and returns it.
func (f *Framework) WaitChecksum(t testing.TB, group string, ok func(string) bool) string {
	t.Helper()
	var got string
	Poll(t, "checksum of group "+group, func(ctx context.Context) (bool, error) {
		sum, err := f.ServedChecksum(ctx, group)
		if err != nil {
			return false, nil
		}
		got = sum
		return ok(got), nil
	})
	return got
}
