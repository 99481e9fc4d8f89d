package staticmachines

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha2 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha2"
)

var t0 = time.Date(2026, 11, 22, 18, 0, 0, 0, time.UTC)

func inst(name string, phase deckhousev1alpha2.StaticInstancePhase, since time.Duration, labels map[string]string) *deckhousev1alpha2.StaticInstance {
	i := &deckhousev1alpha2.StaticInstance{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, CreationTimestamp: metav1.NewTime(t0.Add(-time.Hour))}}
	if phase != "" {
		at := metav1.NewTime(t0.Add(-since))
		i.Status.CurrentStatus = &deckhousev1alpha2.StaticInstanceCurrentStatus{Phase: phase, LastUpdateTime: &at}
	}
	return i
}

func TestPickInstance(t *testing.T) {
	worker := map[string]string{"role": "worker"}
	denied := map[string]string{"role": "worker", deckhousev1.AllowBootstrapLabel: "false"}
	bound := inst("a-bound", deckhousev1alpha2.StaticInstancePending, time.Hour, worker)
	bound.Status.MachineRef = &corev1.ObjectReference{Name: "m"}
	deleting := inst("a-deleting", deckhousev1alpha2.StaticInstancePending, time.Hour, worker)
	deleting.DeletionTimestamp = &metav1.Time{Time: t0}
	sel, err := instanceSelector(&metav1.LabelSelector{MatchLabels: worker})
	if err != nil {
		t.Fatal(err)
	}
	everything, _ := instanceSelector(nil)

	for _, c := range []struct {
		name      string
		instances []*deckhousev1alpha2.StaticInstance
		sel       bool // use the worker selector (else none)
		want      string
	}{
		{"none", nil, true, ""},
		{"the one Pending longest", []*deckhousev1alpha2.StaticInstance{
			inst("b", deckhousev1alpha2.StaticInstancePending, time.Minute, worker),
			inst("c", deckhousev1alpha2.StaticInstancePending, time.Hour, worker)}, true, "c"},
		{"by name on a tie", []*deckhousev1alpha2.StaticInstance{
			inst("d", deckhousev1alpha2.StaticInstancePending, time.Hour, worker),
			inst("c", deckhousev1alpha2.StaticInstancePending, time.Hour, worker)}, true, "c"},
		{"never allow-bootstrap=false, even with no selector", []*deckhousev1alpha2.StaticInstance{
			inst("a", deckhousev1alpha2.StaticInstancePending, time.Hour, denied)}, false, ""},
		{"allow-bootstrap=false skipped for the next", []*deckhousev1alpha2.StaticInstance{
			inst("a", deckhousev1alpha2.StaticInstancePending, 2*time.Hour, denied),
			inst("b", deckhousev1alpha2.StaticInstancePending, time.Hour, worker)}, true, "b"},
		{"labels must match", []*deckhousev1alpha2.StaticInstance{
			inst("a", deckhousev1alpha2.StaticInstancePending, time.Hour, map[string]string{"role": "db"})}, true, ""},
		{"busy, bound and deleting are not free", []*deckhousev1alpha2.StaticInstance{
			inst("a", deckhousev1alpha2.StaticInstanceRunning, time.Hour, worker),
			inst("b", deckhousev1alpha2.StaticInstanceBootstrapping, time.Hour, worker),
			inst("c", deckhousev1alpha2.StaticInstanceCleaning, time.Hour, worker),
			bound, deleting}, true, ""},
		{"never seen is free", []*deckhousev1alpha2.StaticInstance{inst("new", "", 0, worker)}, true, "new"},
		{"Error only after a while", []*deckhousev1alpha2.StaticInstance{
			inst("a", deckhousev1alpha2.StaticInstanceError, time.Minute, worker)}, true, ""},
		{"Error again after errorRetry", []*deckhousev1alpha2.StaticInstance{
			inst("a", deckhousev1alpha2.StaticInstanceError, errorRetry, worker)}, true, "a"},
	} {
		s := everything
		if c.sel {
			s = sel
		}
		got := pickInstance(c.instances, s, t0)
		if name := nameOf(got); name != c.want {
			t.Errorf("%s: picked %q, want %q", c.name, name, c.want)
		}
	}
}

func nameOf(i *deckhousev1alpha2.StaticInstance) string {
	if i == nil {
		return ""
	}
	return i.Name
}
