package instances

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// TombstoneTTL is how long the name of a node whose Instance node-manager
// deleted stays its group's: a bootstrap token of another group may not
// obtain a certificate under it for that long. It outlasts the bootstrap
// tokens' own lifetime, so a token leaked from a node that is gone cannot
// take its name either.
const TombstoneTTL = 24 * time.Hour

// Tombstone is what is remembered of a deleted Instance.
type Tombstone struct {
	Group     string      `json:"group"`
	DeletedAt metav1.Time `json:"deletedAt"`
}

// Tombstones are the names of recently deleted Instances, kept in the
// ConfigMap NodeNameTombstonesConfigMap of node-manager's namespace (so a
// new leader knows them). Reads go to the API: a name is looked up only
// when a certificate is asked for it, and a tombstone written just before
// its Instance was deleted must be seen.
type Tombstones struct {
	Kube      kubernetes.Interface
	Namespace string
	Clock     clock.PassiveClock
}

// Lookup returns the live tombstone of name, if there is one.
func (t *Tombstones) Lookup(ctx context.Context, name string) (Tombstone, bool, error) {
	cm, err := t.Kube.CoreV1().ConfigMaps(t.Namespace).Get(ctx, deckhousev1.NodeNameTombstonesConfigMap, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return Tombstone{}, false, nil
	}
	if err != nil {
		return Tombstone{}, false, fmt.Errorf("reading ConfigMap %s/%s (names of deleted nodes): %w", t.Namespace, deckhousev1.NodeNameTombstonesConfigMap, err)
	}
	ts, ok := t.parse(cm.Data[name])
	return ts, ok, nil
}

// Record remembers that the Instance name of group is being deleted, and
// forgets the tombstones that have expired. A conflict is an error (the
// caller's sync is retried).
func (t *Tombstones) Record(ctx context.Context, name, group string) error {
	raw, _ := json.Marshal(Tombstone{Group: group, DeletedAt: metav1.NewTime(t.Clock.Now().Truncate(time.Second))})
	client := t.Kube.CoreV1().ConfigMaps(t.Namespace)
	cm, err := client.Get(ctx, deckhousev1.NodeNameTombstonesConfigMap, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = client.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: deckhousev1.NodeNameTombstonesConfigMap, Namespace: t.Namespace,
				Labels: map[string]string{deckhousev1.ManagedByLabel: deckhousev1.NodeManagerControllerName}},
			Data: map[string]string{name: string(raw)},
		}, metav1.CreateOptions{FieldManager: deckhousev1.NodeManagerControllerName})
	} else if err == nil {
		cm = cm.DeepCopy()
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		for k, v := range cm.Data {
			if _, live := t.parse(v); !live {
				delete(cm.Data, k)
			}
		}
		cm.Data[name] = string(raw)
		_, err = client.Update(ctx, cm, metav1.UpdateOptions{FieldManager: deckhousev1.NodeManagerControllerName})
	}
	if err != nil {
		return fmt.Errorf("remembering node %s of group %s in ConfigMap %s/%s before deleting its Instance: %w",
			name, group, t.Namespace, deckhousev1.NodeNameTombstonesConfigMap, err)
	}
	return nil
}

// parse reads one tombstone; an unreadable or expired one is none.
func (t *Tombstones) parse(v string) (Tombstone, bool) {
	var ts Tombstone
	if v == "" || json.Unmarshal([]byte(v), &ts) != nil || ts.Group == "" {
		return Tombstone{}, false
	}
	return ts, t.Clock.Since(ts.DeletedAt.Time) < TombstoneTTL
}
