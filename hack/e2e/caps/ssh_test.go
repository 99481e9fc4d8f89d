package caps

import (
	"context"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	deckhousev1alpha2 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha2"
	"github.com/node-manager/node-manager/controllers/caps/hostssh"
	"github.com/node-manager/node-manager/hack/e2e/framework"
	"github.com/node-manager/node-manager/hack/e2e/framework/debianroot"
	"github.com/node-manager/node-manager/templates"
)

// startHost starts one simulated SSH host on 127.0.0.2.
func startHost(t *testing.T, logins *framework.SSHLogins) *framework.SSHHost {
	t.Helper()
	debianroot.RequireRoot(t)
	root := debianroot.Fresh(t, templates.BuiltinVersions().BasePackages["debian"])
	return framework.StartSSHHost(t, "static-1", root, "127.0.0.2", framework.SSHPort(t, 1), logins)
}

func credentials(t *testing.T, spec deckhousev1alpha2.SSHCredentialsSpec) hostssh.Credentials {
	t.Helper()
	c, err := hostssh.FromSpec(spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestSSHAgainstRealSSHD runs the CAPS SSH layer against Debian's sshd in a
// simulated host: every login kind gets a root shell confined to the host,
// the password never reaches the script, a wrong password or a changed
// host key is refused without the secret in the error, and a host that dies
// mid-session ends the session with an error while its files survive a
// restart.
func TestSSHAgainstRealSSHD(t *testing.T) {
	logins := framework.NewSSHLogins(t)
	h := startHost(t, logins)
	b64 := func(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
	port := int32(h.Port)
	host := hostssh.Host{Address: h.Address, PinnedKey: h.HostKey}
	ctx := framework.Context(t)
	probe := "echo uid=$(id -u) host=$(hostname) pid1=$(cat /proc/1/comm); cat\n"

	for name, spec := range map[string]deckhousev1alpha2.SSHCredentialsSpec{
		"root with a key":               {User: "root", PrivateSSHKey: b64(logins.RootKey), SSHPort: port},
		"a sudo user with a key":        {User: logins.SudoUser, PrivateSSHKey: b64(logins.SudoKey), SSHPort: port},
		"a user with a password":        {User: logins.PasswordUser, SudoPasswordEncoded: b64([]byte(logins.Password)), SSHPort: port},
		"a sudo user with key+password": {User: logins.SudoUser, PrivateSSHKey: b64(logins.SudoKey), SudoPasswordEncoded: b64([]byte(logins.Password)), SSHPort: port},
	} {
		res, err := hostssh.Run(ctx, host, credentials(t, spec), probe)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%s: %v, exit %d\n%s", name, err, res.ExitCode, res.Output)
		}
		out := string(res.Output)
		if !strings.Contains(out, "uid=0 host=static-1 pid1=sshd") {
			t.Errorf("%s: not a root shell confined to the host: %q", name, out)
		}
		if strings.Contains(out, logins.Password) {
			t.Errorf("%s: the password reached the script: %q", name, out)
		}
		if res.HostKey != h.HostKey {
			t.Errorf("%s: saw host key %q, want %q", name, res.HostKey, h.HostKey)
		}
	}

	wrong := credentials(t, deckhousev1alpha2.SSHCredentialsSpec{User: logins.PasswordUser, SudoPasswordEncoded: b64([]byte("not-" + logins.Password)), SSHPort: port})
	_, err := hostssh.Run(ctx, host, wrong, probe)
	var sshErr *hostssh.Error
	if !errors.As(err, &sshErr) || !strings.Contains(err.Error(), "unable to authenticate") || strings.Contains(err.Error(), logins.Password) {
		t.Errorf("wrong password: want an authentication error without the password, got %v", err)
	}

	root := credentials(t, deckhousev1alpha2.SSHCredentialsSpec{User: "root", PrivateSSHKey: b64(logins.RootKey), SSHPort: port})
	otherKey := strings.Fields(h.HostKey)[0] + " AAAAC3NzaC1lZDI1NTE5AAAAIBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB"
	if _, err := hostssh.Run(ctx, hostssh.Host{Address: h.Address, PinnedKey: otherKey}, root, probe); !errors.Is(err, hostssh.ErrHostKeyMismatch) {
		t.Errorf("a host whose key is not the pinned one: want ErrHostKeyMismatch, got %v", err)
	}
	if res, err := hostssh.Run(ctx, hostssh.Host{Address: h.Address, TrustOnFirstUse: true}, root, probe); err != nil || res.HostKey != h.HostKey {
		t.Errorf("trust on first use: want the host's key %q reported, got %q, %v", h.HostKey, res.HostKey, err)
	}
	// Neither pinned nor trusted on first use: not contacted at all.
	logins0 := h.Logins()
	if _, err := hostssh.Run(ctx, hostssh.Host{Address: h.Address}, root, probe); !errors.Is(err, hostssh.ErrHostKeyNotPinned) || h.Logins() != logins0 {
		t.Errorf("an unpinned host without trust on first use: want ErrHostKeyNotPinned and no login, got %v (logins %d -> %d)", err, logins0, h.Logins())
	}

	// The host dies while a script runs: the session fails, the script's
	// later steps never happen, its earlier files stay, and after a restart
	// the host is reachable again.
	done := make(chan error, 1)
	go func() {
		_, err := hostssh.Run(context.Background(), host, root, "echo started > /var/tmp/marker; sleep 30; echo finished >> /var/tmp/marker\n")
		done <- err
	}()
	framework.Poll(t, "the long script to start", func(context.Context) (bool, error) {
		_, err := os.Stat(filepath.Join(h.Root, "var/tmp/marker"))
		return err == nil, nil
	})
	h.Stop()
	select {
	case err := <-done:
		if err == nil {
			t.Error("the session of a host that died ended without an error")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the session of a host that died did not end")
	}
	h.Start()
	res, err := hostssh.Run(ctx, host, root, "cat /var/tmp/marker; pgrep -c sleep || true\n")
	if err != nil || strings.TrimSpace(string(res.Output)) != "started\n0" {
		t.Errorf("after the restart: want only 'started' and no sleep left, got %q, %v", res.Output, err)
	}
}
