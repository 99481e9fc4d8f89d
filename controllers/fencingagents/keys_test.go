package fencingagents

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/node-manager/node-manager/agents/fencing-agent/gossipkey"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

func (c *Controller) keySecret(t *testing.T, kube *kubefake.Clientset, group string) *corev1.Secret {
	t.Helper()
	s, err := kube.CoreV1().Secrets(deckhousev1.Namespace).Get(context.Background(), KeySecretName(group), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitCached(t, func() bool {
		have, err := c.secrets.Secrets(deckhousev1.Namespace).Get(s.Name)
		return err == nil && equality.Semantic.DeepEqual(have.Data, s.Data) && equality.Semantic.DeepEqual(have.Annotations, s.Annotations)
	})
	return s
}

// node is an armed, Ready Node of group whose agent reports keyring fp.
func node(name, group, fp string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
		Labels:      map[string]string{deckhousev1.NodeGroupLabel: group, deckhousev1.NodeGroupRestrictedLabel: group, deckhousev1.FencingEnabledLabel: ""},
		Annotations: map[string]string{deckhousev1.FencingGossipKeyringAnnotation: fp}}}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	return n
}

// A fenced group gets a keyring of one key; a rotation asked for hands out
// the next key, switches to it only once every armed agent holds it, and
// drops the old one only once every agent encrypts with the new.
func TestTheGossipKeyRotatesOnlyAsFastAsTheAgentsFollow(t *testing.T) {
	c, kube, _ := controllerWith(t, fenced("workers", deckhousev1.FencingModeWatchdog))
	ctx := context.Background()
	sync := func() {
		t.Helper()
		if err := c.sync(ctx, "workers"); err != nil {
			t.Fatal(err)
		}
	}
	sync()
	s := c.keySecret(t, kube, "workers")
	k1, err := gossipkey.FromData(s.Data)
	if err != nil || k1.Other != nil || s.Type != corev1.SecretTypeOpaque {
		t.Fatalf("the first keyring: %+v, %v", s, err)
	}
	report := func(fp string) {
		t.Helper()
		for _, name := range []string{"w0", "w1"} {
			n := node(name, "workers", fp)
			if _, err := kube.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
				if _, err := kube.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
		}
		waitCached(t, func() bool {
			n, err := c.nodes.Get("w1")
			return err == nil && n.Annotations[deckhousev1.FencingGossipKeyringAnnotation] == fp
		})
	}
	report(k1.Fingerprint())
	sync()
	if s2 := c.keySecret(t, kube, "workers"); !equality.Semantic.DeepEqual(s2.Data, s.Data) {
		t.Fatal("the keyring changed though no rotation was due or asked for")
	}

	s.Annotations[deckhousev1.FencingGossipRotateAnnotation] = ""
	if _, err := kube.CoreV1().Secrets(deckhousev1.Namespace).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitCached(t, func() bool {
		have, err := c.secrets.Secrets(deckhousev1.Namespace).Get(s.Name)
		_, asked := have.Annotations[deckhousev1.FencingGossipRotateAnnotation]
		return err == nil && asked
	})
	sync()
	s = c.keySecret(t, kube, "workers")
	k2, _ := gossipkey.FromData(s.Data)
	if _, asked := s.Annotations[deckhousev1.FencingGossipRotateAnnotation]; asked || s.Data[deckhousev1.FencingGossipKeyNext] == nil || !k2.Equal(gossipkey.Keys{Primary: k1.Primary, Other: s.Data[deckhousev1.FencingGossipKeyNext]}) {
		t.Fatalf("after the rotation was asked for: %v", s.Data)
	}
	// The agents still report the old keyring: nothing moves.
	sync()
	if !equality.Semantic.DeepEqual(c.keySecret(t, kube, "workers").Data, s.Data) {
		t.Fatal("switched to the next key before the agents held it")
	}
	report(k2.Fingerprint())
	sync()
	s = c.keySecret(t, kube, "workers")
	k3, _ := gossipkey.FromData(s.Data)
	if !k3.Equal(gossipkey.Keys{Primary: k2.Other, Other: k1.Primary}) || s.Data[deckhousev1.FencingGossipKeyPrevious] == nil {
		t.Fatalf("after every agent held the next key: %v", s.Data)
	}
	sync()
	if !equality.Semantic.DeepEqual(c.keySecret(t, kube, "workers").Data, s.Data) {
		t.Fatal("dropped the previous key before the agents encrypted with the new one")
	}
	report(k3.Fingerprint())
	sync()
	s = c.keySecret(t, kube, "workers")
	k4, _ := gossipkey.FromData(s.Data)
	if !k4.Equal(gossipkey.Keys{Primary: k2.Other}) {
		t.Fatalf("after every agent encrypted with the new key: %v", s.Data)
	}
}

// TestARelabelledNodeDoesNotHoldTheRotation: a rotation waits for the
// agents of the group's nodes, those its DaemonSet runs on (the
// restricted group label), not for a node of another group that labelled
// itself into it, armed and Ready with its own group's keyring.
func TestARelabelledNodeDoesNotHoldTheRotation(t *testing.T) {
	rogue := node("rogue", "others", "ffffffffffffffff")
	rogue.Labels[deckhousev1.NodeGroupLabel] = "workers"
	c, _, _ := controllerWithObjects(t, []runtime.Object{node("w0", "workers", "0123456789abcdef"), rogue}, nil)
	waiting, err := c.agentsWithout("workers", "0123456789abcdef")
	if err != nil || len(waiting) != 0 {
		t.Fatalf("the rotation of workers waits for %v (%v); want no one: rogue is of group others", waiting, err)
	}
	if waiting, _ := c.agentsWithout("others", "0123456789abcdef"); len(waiting) != 1 || waiting[0] != "rogue" {
		t.Fatalf("the rotation of others waits for %v, want [rogue]", waiting)
	}
}
