package access

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/tools/cache"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha1"
	nmfake "github.com/node-manager/node-manager/generated/clientset/versioned/fake"
)

// TestNarrowerCachesOnlyTheGroupOfAnInstance: the Narrower's cache keeps
// an Instance's name and labels, not its status, annotations or
// managedFields, and still resolves the node's scope from it.
func TestNarrowerCachesOnlyTheGroupOfAnInstance(t *testing.T) {
	inst := instance("w1", "worker")
	inst.Annotations = map[string]string{"example.com/note": "large"}
	inst.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationUpdate}}
	inst.Status = deckhousev1alpha1.InstanceStatus{BashibleStatus: "Ready", NodeRef: &deckhousev1alpha1.NodeRef{Name: "w1"}}
	n := NewNarrower(nmfake.NewClientset(inst))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), n.HasSynced) {
		t.Fatal("Instances did not sync")
	}
	cached, err := n.instances.Get("w1")
	if err != nil {
		t.Fatal(err)
	}
	if cached.Annotations != nil || cached.ManagedFields != nil || cached.Status.BashibleStatus != "" || cached.Status.NodeRef != nil {
		t.Errorf("the cached Instance keeps more than its group: %+v", cached)
	}
	scope, err := n.scopeForUser(&user.DefaultInfo{Name: "system:node:w1", Groups: []string{"system:nodes"}}, bashiblev1alpha1.Resource("bashibles"), "worker")
	if err != nil || scope != (Scope{Group: "worker"}) || cached.Labels[deckhousev1.NodeGroupLabel] != "worker" {
		t.Errorf("scope %+v, %v; want the worker group", scope, err)
	}
}
