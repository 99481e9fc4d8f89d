package registry

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"

	bashiblev1alpha1 "github.com/node-manager/node-manager/apiserver/apis/bashible/v1alpha1"
	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// columns are the table columns of every resource: group, node type,
// checksum prefix, steps, size and age; -o wide adds the Kubernetes
// version, the container runtime and the whole checksum.
var columns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name", Description: "The node group"},
	{Name: "Type", Type: "string", Description: "The group's node type"},
	{Name: "Checksum", Type: "string", Description: "The first 12 characters of the configuration checksum"},
	{Name: "Revision", Type: "string", Description: "The bundle revision served, and \"(pinned)\" when the group is pinned to it"},
	{Name: "Steps", Type: "integer", Description: "Steps in the group's bundle"},
	{Name: "Size", Type: "string", Description: "Size of the script(s)"},
	{Name: "Age", Type: "string", Description: "Time since the group's bundle was first published"},
	{Name: "Kubernetes", Type: "string", Priority: 1, Description: "The group's Kubernetes version"},
	{Name: "CRI", Type: "string", Priority: 1, Description: "The group's container runtime"},
	{Name: "Full-Checksum", Type: "string", Priority: 1, Description: "The configuration checksum"},
}

// table prints an object or a list of one resource for kubectl. items
// reads a list's items; cells gives an object's steps (a number, or "-"
// for a resource without steps) and the bytes of script it carries.
func table[T, L any, PT object[T], PL objectList[L]](obj runtime.Object, items func(PL) []T, cells func(PT) (steps any, size int)) (*metav1.Table, error) {
	t := &metav1.Table{ColumnDefinitions: slices.Clone(columns)}
	if co, ok := obj.(runtime.CacheableObject); ok {
		obj = co.GetObject()
	}
	var objs []PT
	switch o := obj.(type) {
	case PT:
		objs = []PT{o}
	case PL:
		t.ResourceVersion = o.GetResourceVersion()
		all := items(o)
		for i := range all {
			objs = append(objs, &all[i])
		}
	default:
		return nil, fmt.Errorf("cannot print %T", obj)
	}
	for _, o := range objs {
		checksum := o.GetAnnotations()[bashiblev1alpha1.ChecksumAnnotation]
		short := checksum
		if len(short) > 12 {
			short = short[:12]
		}
		steps, size := cells(o)
		t.Rows = append(t.Rows, metav1.TableRow{
			Object: runtime.RawExtension{Object: o},
			Cells: []any{
				o.GetName(), o.GetLabels()[deckhousev1.NodeTypeLabel], short, revisionCell(o.GetAnnotations()), steps,
				humanSize(size), age(o.GetCreationTimestamp()),
				o.GetAnnotations()[bashiblev1alpha1.KubernetesVersionAnnotation], o.GetAnnotations()[bashiblev1alpha1.CRIAnnotation], checksum,
			},
		})
	}
	return t, nil
}

// revisionCell is the Revision column: the revision served, "(pinned)"
// added while the group is pinned, "-" for a bundle without one.
func revisionCell(annotations map[string]string) string {
	rev := annotations[bashiblev1alpha1.RevisionAnnotation]
	switch {
	case rev == "":
		return "-"
	case annotations[bashiblev1alpha1.PinnedRevisionAnnotation] != "":
		return rev + " (pinned)"
	default:
		return rev
	}
}

func humanSize(n int) string {
	switch {
	case n >= 1<<20:
		return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + "Mi"
	case n >= 1<<10:
		return strconv.FormatFloat(float64(n)/(1<<10), 'f', 1, 64) + "Ki"
	default:
		return strconv.Itoa(n) + "B"
	}
}

func age(t metav1.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(time.Since(t.Time))
}
