// Package cgroup reads each pod's memory working set from the cgroups the
// kubelet makes for pods, on the node itself rather than through the
// kubelet's API. It knows both cgroup versions and both cgroup drivers:
//
//	cgroupfs driver: <kubepods>/pod<uid>                  (Guaranteed)
//	                 <kubepods>/burstable/pod<uid>
//	                 <kubepods>/besteffort/pod<uid>
//	systemd driver:  kubepods.slice/kubepods-pod<uid_>.slice
//	                 kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice
//	                 kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod<uid_>.slice
//
// where <kubepods> is "kubepods" and, under systemd, the pod UID's dashes
// are underscores (systemd reserves the dash for nesting). The tree is
// under Root/memory on cgroup v1 and directly under Root on v2 (the
// unified hierarchy, recognised by Root/cgroup.controllers).
//
// The working set is what the kubelet's eviction ranks by: usage minus the
// inactive file cache, which the kernel can reclaim without help
// (memory.current and inactive_file on v2; memory.usage_in_bytes and
// total_inactive_file on v1).
//
// On v2 it also reads what tells a node short of memory from a pod
// thrashing inside its own limit (ReadTree): the memory pressure (PSI) of
// the pods' parent cgroup and of each pod, and whether a pod, or one of its
// containers, is at its own memory.max.
package cgroup

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/node-manager/node-manager/agents/early-oom/psi"
)

// DefaultRoot is where the cgroup file systems are mounted.
const DefaultRoot = "/sys/fs/cgroup"

// Version is the cgroup hierarchy in use.
type Version int

const (
	V1 Version = 1
	V2 Version = 2
)

// Usage maps a pod's UID to its memory working set in bytes.
type Usage map[types.UID]int64

// Reader reads pod cgroups under Root (DefaultRoot on a node; a fake tree
// in tests).
type Reader struct {
	Root string
}

// Pod is what one pod's cgroup says.
type Pod struct {
	// WorkingSet is usage minus inactive file cache, in bytes.
	WorkingSet int64
	// Pressure is the pod cgroup's memory.pressure; nil when it cannot be
	// read (cgroup v1 has none).
	Pressure *psi.Pressure
	// AtLimit: the pod, or one of its containers, has a memory.max and
	// uses at least AtLimitShare of it, so that its stalls are its own
	// limit's doing, not the node's (v2 only).
	AtLimit bool
}

// AtLimitShare is the share of its memory.max from which a cgroup counts
// as at its own limit: a thrashing cgroup sits just under it, reclaiming
// its own pages to make room.
const AtLimitShare = 0.9

// Tree is what the pods' cgroups say.
type Tree struct {
	Version Version
	// Pods by UID; a pod cgroup whose files cannot be read (the pod is
	// being torn down) is left out.
	Pods map[types.UID]Pod
	// Parent is the memory.pressure of the pods' parent cgroup (kubepods
	// or kubepods.slice): the stalls of all pods together and nothing
	// else; nil when it cannot be read (cgroup v1 has none).
	Parent *psi.Pressure
}

// Usage is the working set of every pod in the tree.
func (t Tree) Usage() Usage {
	u := make(Usage, len(t.Pods))
	for uid, p := range t.Pods {
		u[uid] = p.WorkingSet
	}
	return u
}

// Read returns the working set of every pod cgroup found, and the cgroup
// version (ReadTree, the working sets only).
func (r Reader) Read() (Usage, Version, error) {
	t, err := r.ReadTree()
	if err != nil {
		return nil, t.Version, err
	}
	return t.Usage(), t.Version, nil
}

// ReadTree reads every pod cgroup found, and on v2 the pods' and their
// parent's memory pressure. A tree with no kubepods cgroup at all is an
// error, since then no pod can be ranked.
func (r Reader) ReadTree() (Tree, error) {
	version, memRoot := V1, filepath.Join(r.Root, "memory")
	if _, err := os.Stat(filepath.Join(r.Root, "cgroup.controllers")); err == nil {
		version, memRoot = V2, r.Root
	}
	t := Tree{Version: version, Pods: map[types.UID]Pod{}}
	found := false
	for _, top := range []string{"kubepods.slice", "kubepods"} {
		dir := filepath.Join(memRoot, top)
		if _, err := os.Stat(dir); err != nil {
			continue
		}
		found = true
		if version == V2 && t.Parent == nil {
			t.Parent = pressure(dir)
		}
		if err := r.readPods(version, dir, t.Pods); err != nil {
			return t, err
		}
	}
	if !found {
		return t, fmt.Errorf("no kubepods or kubepods.slice cgroup under %s (cgroup v%d): is --cgroup-root the host's cgroup mount?", memRoot, version)
	}
	return t, nil
}

// readPods reads the pod cgroups in dir and in its QoS child cgroups
// (burstable, besteffort).
func (r Reader) readPods(version Version, dir string, pods map[types.UID]Pod) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("listing pod cgroups in %s: %w", dir, err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		name := e.Name()
		if uid, ok := PodUID(name); ok {
			podDir := filepath.Join(dir, name)
			ws, err := workingSet(version, podDir)
			if err != nil {
				continue
			}
			p := Pod{WorkingSet: ws}
			if version == V2 {
				p.Pressure = pressure(podDir)
				p.AtLimit = atLimit(podDir)
			}
			pods[uid] = p
			continue
		}
		if isQoSCgroup(name) {
			if err := r.readPods(version, filepath.Join(dir, name), pods); err != nil {
				return err
			}
		}
	}
	return nil
}

// pressure is dir's memory.pressure, nil when it cannot be read or parsed.
func pressure(dir string) *psi.Pressure {
	data, err := os.ReadFile(filepath.Join(dir, "memory.pressure"))
	if err != nil {
		return nil
	}
	p, err := psi.Parse(data)
	if err != nil {
		return nil
	}
	return &p
}

// atLimit says whether the cgroup v2 dir, or one of its child cgroups (the
// pod's containers: a pod whose containers do not all have a limit has
// none of its own), uses at least AtLimitShare of its memory.max.
func atLimit(dir string) bool {
	if limitReached(dir) {
		return true
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		if e.IsDir() && limitReached(filepath.Join(dir, e.Name())) {
			return true
		}
	}
	return false
}

func limitReached(dir string) bool {
	data, err := os.ReadFile(filepath.Join(dir, "memory.max"))
	if err != nil {
		return false
	}
	text := strings.TrimSpace(string(data))
	if text == "max" {
		return false
	}
	limit, err := strconv.ParseInt(text, 10, 64)
	if err != nil || limit <= 0 {
		return false
	}
	current, err := readInt(filepath.Join(dir, "memory.current"))
	if err != nil {
		return false
	}
	return float64(current) >= AtLimitShare*float64(limit)
}

func isQoSCgroup(name string) bool {
	switch name {
	case "burstable", "besteffort", "kubepods-burstable.slice", "kubepods-besteffort.slice":
		return true
	}
	return false
}

// PodUID is the pod UID a pod cgroup's directory name carries, under
// either cgroup driver; ok is false for any other name.
func PodUID(name string) (uid types.UID, ok bool) {
	if unit, isSlice := strings.CutSuffix(name, ".slice"); isSlice {
		// kubepods[-<qos>]-pod<uid_>.slice
		i := strings.LastIndex(unit, "-pod")
		if i < 0 || !strings.HasPrefix(unit, "kubepods-") {
			return "", false
		}
		id := unit[i+len("-pod"):]
		if !validUID(id, '_') {
			return "", false
		}
		return types.UID(strings.ReplaceAll(id, "_", "-")), true
	}
	id, isPod := strings.CutPrefix(name, "pod")
	if !isPod || !validUID(id, '-') {
		return "", false
	}
	return types.UID(id), true
}

// validUID accepts hexadecimal digits and sep, as a UUID's text.
func validUID(id string, sep rune) bool {
	if id == "" {
		return false
	}
	for _, c := range id {
		if c != sep && !strings.ContainsRune("0123456789abcdefABCDEF", c) {
			return false
		}
	}
	return true
}

// workingSet is usage minus inactive file cache, never below zero.
func workingSet(version Version, dir string) (int64, error) {
	usageFile, inactiveKey := "memory.current", "inactive_file"
	if version == V1 {
		usageFile, inactiveKey = "memory.usage_in_bytes", "total_inactive_file"
	}
	usage, err := readInt(filepath.Join(dir, usageFile))
	if err != nil {
		return 0, err
	}
	inactive, err := statValue(filepath.Join(dir, "memory.stat"), inactiveKey)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return 0, err
	}
	return max(usage-inactive, 0), nil
}

func readInt(path string) (int64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

// statValue is key's value in a memory.stat file; a file without the key
// counts it as zero.
func statValue(path, key string) (int64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok && k == key {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s: %s: %w", path, key, err)
			}
			return n, nil
		}
	}
	return 0, nil
}
