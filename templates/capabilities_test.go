package templates

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
)

// TestNodeCapabilitiesAreDecidedAsDeckhouseDecidesThem runs the library's
// bb-node-capabilities with the machine's answers stubbed (uname, stat of
// /sys/fs/cgroup, systemctl --version, modprobe) and its files under
// BASHIBLE_ROOT, and reads the Node patch it prints.
func TestNodeCapabilitiesAreDecidedAsDeckhouseDecidesThem(t *testing.T) {
	type want struct {
		cgroup, config, unsupported, errs any // nil: removed
	}
	for _, tc := range []struct {
		name, cri, kernel, cgroup, systemd string
		erofs, confD                       bool
		want                               want
	}{
		{"a modern node", "Containerd", "6.1.0-18-amd64", deckhousev1.CgroupV2Value, "252", true, false,
			want{deckhousev1.CgroupV2Value, deckhousev1.ContainerdConfigDefaultValue, nil, nil}},
		{"an old node with its own containerd configuration", "Containerd", "5.4.0-150-generic", "tmpfs", "237", false, true,
			want{"tmpfs", deckhousev1.ContainerdConfigCustomValue, "", `["kernel","systemd","cgroupv2","erofs"]`}},
		{"kernel 5.8 and systemd 244 are enough", "Containerd", "5.8.0", deckhousev1.CgroupV2Value, "244", true, false,
			want{deckhousev1.CgroupV2Value, deckhousev1.ContainerdConfigDefaultValue, nil, nil}},
		{"no erofs only", "ContainerdV2", "6.8.0", deckhousev1.CgroupV2Value, "255", false, false,
			want{deckhousev1.CgroupV2Value, nil, "", `["erofs"]`}},
		{"another runtime: no containerd-config label", "NotManaged", "6.8.0", deckhousev1.CgroupV2Value, "255", true, true,
			want{deckhousev1.CgroupV2Value, nil, nil, nil}},
		{"an unreadable cgroup file system", "Containerd", "6.8.0", "", "255", true, false,
			want{"unknown", deckhousev1.ContainerdConfigDefaultValue, "", `["cgroupv2"]`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			root := filepath.Join(dir, "root")
			for _, d := range []string{"var/lib/bashible", "proc", "etc/containerd/conf.d"} {
				if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			filesystems := "nodev\tproc\n\text4\n"
			if tc.erofs {
				filesystems += "\terofs\n"
			}
			writeFile(t, filepath.Join(root, "proc/filesystems"), filesystems)
			if tc.confD {
				writeFile(t, filepath.Join(root, "etc/containerd/conf.d/mirror.toml"), "oom_score = 500\n")
			}
			writeFile(t, filepath.Join(root, "etc/containerd/conf.d/README"), "not a .toml file\n")
			writeFile(t, filepath.Join(dir, "lib.sh"), libraryOf(t))
			stubs := `uname() { echo "$KERNEL"; }
stat() { [[ -n "$CGROUP" ]] || return 1; echo "$CGROUP"; }
systemctl() { echo "systemd $SYSTEMD ($SYSTEMD.1-1)"; echo "+PAM +AUDIT"; }
modprobe() { return 1; }
`
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, "bash", "--noprofile", "--norc", "-c", `set -Eeuo pipefail; source "$1"; eval "$2"; bb-node-capabilities "$3"`,
				"bashible", filepath.Join(dir, "lib.sh"), stubs, tc.cri)
			cmd.Env = append(os.Environ(), "LC_ALL=C", "BASHIBLE_ROOT="+root, "KERNEL="+tc.kernel, "CGROUP="+tc.cgroup, "SYSTEMD="+tc.systemd)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("bb-node-capabilities: %v\n%s", err, out)
			}
			var patch struct {
				Metadata struct {
					Labels      map[string]any `json:"labels"`
					Annotations map[string]any `json:"annotations"`
				} `json:"metadata"`
			}
			if err := json.Unmarshal(out, &patch); err != nil {
				t.Fatalf("not a JSON patch: %v\n%s", err, out)
			}
			got := want{patch.Metadata.Labels[deckhousev1.CgroupLabel], patch.Metadata.Labels[deckhousev1.ContainerdConfigLabel],
				patch.Metadata.Labels[deckhousev1.ContainerdV2UnsupportedLabel], patch.Metadata.Annotations[deckhousev1.ContainerdV2ErrorAnnotation]}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("patch %s\ngot  %+v\nwant %+v", out, got, tc.want)
			}
			// Every key is in the patch, so a value no longer true is removed (null).
			for _, k := range []string{deckhousev1.CgroupLabel, deckhousev1.ContainerdConfigLabel, deckhousev1.ContainerdV2UnsupportedLabel} {
				if _, ok := patch.Metadata.Labels[k]; !ok {
					t.Errorf("the patch leaves %s out: a stale value would stay", k)
				}
			}
		})
	}
}
