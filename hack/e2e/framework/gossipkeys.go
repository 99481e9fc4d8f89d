package framework

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/node-manager/node-manager/agents/fencing-agent/gossipkey"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// GossipKeyVolume plays the kubelet for one agent's gossip keyring: it
// watches the group's Secret and writes its data into Dir as the kubelet
// writes a Secret volume (a ..data symlink swapped atomically to a new
// directory, one symlink per key), so the agent reads it as in a pod.
type GossipKeyVolume struct {
	Dir  string
	kube kubernetes.Interface

	mu       sync.Mutex
	paused   bool
	written  string // resourceVersion written last
	pending  *corev1.Secret
	versions int
}

// MountGossipKeys starts a GossipKeyVolume of Secret name in node-manager's
// namespace into dir; it stops with the test.
func MountGossipKeys(t *testing.T, kube kubernetes.Interface, name, dir string) *GossipKeyVolume {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	v := &GossipKeyVolume{Dir: dir, kube: kube}
	lw := cache.NewListWatchFromClient(kube.CoreV1().RESTClient(), "secrets", deckhousev1.Namespace, fields.OneTermEqualSelector("metadata.name", name))
	_, inf := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: lw,
		ObjectType:    &corev1.Secret{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { v.update(obj.(*corev1.Secret)) },
			UpdateFunc: func(_, obj any) { v.update(obj.(*corev1.Secret)) },
		},
	})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go inf.Run(ctx.Done())
	return v
}

// Pause holds the volume at what it has, as a kubelet that does not sync
// (down, or slow); Resume writes what arrived meanwhile.
func (v *GossipKeyVolume) Pause() { v.mu.Lock(); v.paused = true; v.mu.Unlock() }

// Resume writes the Secret's latest data.
func (v *GossipKeyVolume) Resume() {
	v.mu.Lock()
	v.paused = false
	s := v.pending
	v.mu.Unlock()
	if s != nil {
		v.update(s)
	}
}

func (v *GossipKeyVolume) update(s *corev1.Secret) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.paused {
		v.pending = s
		return
	}
	v.pending = nil
	if s.ResourceVersion == v.written {
		return
	}
	v.versions++
	if err := writeAtomically(v.Dir, strconv.Itoa(v.versions), s.Data); err != nil {
		panic(fmt.Sprintf("writing the gossip keyring volume %s: %v", v.Dir, err))
	}
	v.written = s.ResourceVersion
}

// writeAtomically lays data out in dir as the kubelet's atomic writer does.
func writeAtomically(dir, version string, data map[string][]byte) error {
	ts := filepath.Join(dir, "..v"+version)
	if err := os.Mkdir(ts, 0o700); err != nil {
		return err
	}
	for k, val := range data {
		if err := os.WriteFile(filepath.Join(ts, k), val, 0o400); err != nil {
			return err
		}
	}
	tmp := filepath.Join(dir, "..data_tmp")
	_ = os.Remove(tmp)
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		return err
	}
	for _, k := range []string{deckhousev1.FencingGossipKeyPrimary, deckhousev1.FencingGossipKeyNext, deckhousev1.FencingGossipKeyPrevious} {
		link := filepath.Join(dir, k)
		if _, ok := data[k]; !ok {
			_ = os.Remove(link)
			continue
		}
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join("..data", k), link); err != nil {
			return err
		}
	}
	return nil
}

// EnsureGossipKeySecret creates the group's gossip keyring Secret as the
// cluster administrator with a fresh key, where no node-manager-controller
// runs to make it; an existing one is kept.
func (f *Framework) EnsureGossipKeySecret(t *testing.T, group string) {
	t.Helper()
	name := deckhousev1.FencingGossipKeySecretPrefix + group
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: deckhousev1.Namespace},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{deckhousev1.FencingGossipKeyPrimary: gossipkey.New()},
	}
	_, err := f.Kube.CoreV1().Secrets(deckhousev1.Namespace).Create(Context(t), s, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = f.Kube.CoreV1().Secrets(deckhousev1.Namespace).Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// WaitGossipKeySecret waits until the group's gossip keyring Secret
// exists (node-manager-controller makes it for a fenced group).
func (f *Framework) WaitGossipKeySecret(t *testing.T, group string) *corev1.Secret {
	t.Helper()
	var s *corev1.Secret
	Poll(t, "the gossip keyring Secret of group "+group, func(ctx context.Context) (bool, error) {
		var err error
		s, err = f.Kube.CoreV1().Secrets(deckhousev1.Namespace).Get(ctx, deckhousev1.FencingGossipKeySecretPrefix+group, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
	return s
}
