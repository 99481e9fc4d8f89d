package cgroup

import (
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// write makes a pod cgroup's memory files under root/rel.
func write(t *testing.T, root, rel, usageFile string, usage int64, stat string) {
	t.Helper()
	dir := filepath.Join(root, rel)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, usageFile), []byte(strconv.FormatInt(usage, 10)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "memory.stat"), []byte(stat), 0o644); err != nil {
		t.Fatal(err)
	}
}

const (
	guaranteed = types.UID("0a1b2c3d-0000-4000-8000-000000000001")
	burstable  = types.UID("0a1b2c3d-0000-4000-8000-000000000002")
	besteffort = types.UID("0a1b2c3d-0000-4000-8000-000000000003")
)

func TestV2SystemdTreeGivesWorkingSetPerPod(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "cgroup.controllers"), []byte("cpu memory pids\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	write(t, root, "kubepods.slice/kubepods-pod0a1b2c3d_0000_4000_8000_000000000001.slice", "memory.current", 500, "anon 400\ninactive_file 100\n")
	write(t, root, "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0a1b2c3d_0000_4000_8000_000000000002.slice", "memory.current", 900, "inactive_file 300\nactive_file 10\n")
	write(t, root, "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod0a1b2c3d_0000_4000_8000_000000000003.slice", "memory.current", 50, "inactive_file 80\n")
	// A container's cgroup inside a pod is not a pod.
	write(t, root, "kubepods.slice/kubepods-burstable.slice/cri-containerd-abc.scope", "memory.current", 7, "")

	usage, version, err := Reader{Root: root}.Read()
	if err != nil {
		t.Fatal(err)
	}
	want := Usage{guaranteed: 400, burstable: 600, besteffort: 0}
	if version != V2 || !maps.Equal(usage, want) {
		t.Errorf("got %v (v%d); want %v (v2)", usage, version, want)
	}
}

func TestV1CgroupfsTreeGivesWorkingSetPerPod(t *testing.T) {
	root := t.TempDir()
	write(t, root, "memory/kubepods/pod"+string(guaranteed), "memory.usage_in_bytes", 1000, "cache 10\ntotal_inactive_file 200\n")
	write(t, root, "memory/kubepods/burstable/pod"+string(burstable), "memory.usage_in_bytes", 3000, "total_inactive_file 1000\n")
	write(t, root, "memory/kubepods/besteffort/pod"+string(besteffort), "memory.usage_in_bytes", 20, "")
	// The container cgroup below a pod is not listed as a pod.
	write(t, root, "memory/kubepods/burstable/pod"+string(burstable)+"/0123abcd", "memory.usage_in_bytes", 5, "")

	usage, version, err := Reader{Root: root}.Read()
	if err != nil {
		t.Fatal(err)
	}
	want := Usage{guaranteed: 800, burstable: 2000, besteffort: 20}
	if version != V1 || !maps.Equal(usage, want) {
		t.Errorf("got %v (v%d); want %v (v1)", usage, version, want)
	}
}

func TestV1SystemdTree(t *testing.T) {
	root := t.TempDir()
	write(t, root, "memory/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0a1b2c3d_0000_4000_8000_000000000002.slice", "memory.usage_in_bytes", 64, "total_inactive_file 4\n")
	usage, _, err := Reader{Root: root}.Read()
	if err != nil || !maps.Equal(usage, Usage{burstable: 60}) {
		t.Errorf("got %v, %v", usage, err)
	}
}

func TestNoKubepodsIsAnError(t *testing.T) {
	if _, _, err := (Reader{Root: t.TempDir()}).Read(); err == nil {
		t.Error("a tree without kubepods gave no error")
	}
}

func TestPodUID(t *testing.T) {
	for name, want := range map[string]types.UID{
		"pod" + string(burstable): burstable,
		"kubepods-burstable-pod0a1b2c3d_0000_4000_8000_000000000002.slice": burstable,
		"kubepods-pod0a1b2c3d_0000_4000_8000_000000000001.slice":           guaranteed,
		"kubepods-burstable.slice":                                         "",
		"burstable":                                                        "",
		"podsomething":                                                     "",
		"system.slice":                                                     "",
		"cri-containerd-0a1b.scope":                                        "",
		"kubepods-besteffort-pod.slice":                                    "",
	} {
		got, ok := PodUID(name)
		if got != want || ok != (want != "") {
			t.Errorf("PodUID(%q) = %q, %v; want %q", name, got, ok, want)
		}
	}
}

// TestV2TreeReadsPressureAndWhoIsAtItsLimit: the parent's and each pod's
// memory.pressure, and a pod at its own limit whether the limit is the
// pod's or one of its containers'.
func TestV2TreeReadsPressureAndWhoIsAtItsLimit(t *testing.T) {
	root := t.TempDir()
	file := func(rel, data string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, rel)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, rel), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	file("cgroup.controllers", "memory\n")
	file("kubepods.slice/memory.pressure", "some avg10=70.00 avg60=0 avg300=0 total=1\nfull avg10=60.00 avg60=0 avg300=0 total=1\n")
	g := "kubepods.slice/kubepods-pod0a1b2c3d_0000_4000_8000_000000000001.slice"
	write(t, root, g, "memory.current", 1000, "")
	file(g+"/memory.max", "1024\n")
	file(g+"/memory.pressure", "some avg10=70.00 avg60=0 avg300=0 total=1\nfull avg10=65.00 avg60=0 avg300=0 total=1\n")
	b := "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0a1b2c3d_0000_4000_8000_000000000002.slice"
	write(t, root, b, "memory.current", 1000, "")
	file(b+"/memory.max", "max\n")
	file(b+"/cri-containerd-abc.scope/memory.max", "1000\n")
	file(b+"/cri-containerd-abc.scope/memory.current", "950\n")
	e := "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod0a1b2c3d_0000_4000_8000_000000000003.slice"
	write(t, root, e, "memory.current", 5000, "")
	file(e+"/memory.max", "max\n")

	tree, err := Reader{Root: root}.ReadTree()
	if err != nil {
		t.Fatal(err)
	}
	if tree.Parent == nil || tree.Parent.Full.Avg10 != 60 {
		t.Errorf("parent pressure %+v; want full avg10 60", tree.Parent)
	}
	if p := tree.Pods[guaranteed]; !p.AtLimit || p.Pressure == nil || p.Pressure.Full.Avg10 != 65 {
		t.Errorf("the Guaranteed pod at its limit: %+v", p)
	}
	if p := tree.Pods[burstable]; !p.AtLimit {
		t.Errorf("the pod whose container is at its limit: %+v; want AtLimit", p)
	}
	if p := tree.Pods[besteffort]; p.AtLimit || p.Pressure != nil {
		t.Errorf("the pod without a limit or a pressure file: %+v", p)
	}
}
