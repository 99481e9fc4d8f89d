package framework

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/node-manager/node-manager/controllers/caps/hostssh"
	"github.com/node-manager/node-manager/hack/controlplane"
	"github.com/node-manager/node-manager/hack/e2e/framework/debianroot"
)

// SSHLogins are the accounts every simulated SSH host accepts: root with a
// key, a key user with password-less sudo, and a password user whose sudo
// asks for that password. The keys are made for the suite.
type SSHLogins struct {
	// RootKey and SudoKey are private keys in PEM form (OpenSSH format).
	RootKey, SudoKey []byte
	// SudoUser logs in with SudoKey; PasswordUser with Password.
	SudoUser, PasswordUser, Password string

	rootPub, sudoPub string
}

// NewSSHLogins makes the suite's keys and password.
func NewSSHLogins(t testing.TB) *SSHLogins {
	t.Helper()
	l := &SSHLogins{SudoUser: "caps-sudo", PasswordUser: "caps-password", Password: "pw-" + randomWord(t)}
	l.RootKey, l.rootPub = newKey(t)
	l.SudoKey, l.sudoPub = newKey(t)
	return l
}

func newKey(t testing.TB) (private []byte, authorized string) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(block), hostssh.FormatKey(sshPub)
}

func randomWord(t testing.TB) string {
	t.Helper()
	b := make([]byte, 9)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", b)
}

// SSHHost is a simulated host: Debian's own sshd (openssh-server, built
// into the Debian root by debianroot) running inside a test's root,
// in namespaces of its own (mount, UTS, IPC, PID), listening on
// Address:Port. Its sessions see only the root: sshd is PID 1 there, and
// killing it (Stop) ends every process of the host at once, as a power
// loss would; the root's files stay, and Start boots sshd again. Nothing
// runs on the test machine itself, and no host account is made. The host
// shares the machine's network and resolves controlplane.APIServerDNSName
// to 127.0.0.1, so it reaches the local control plane by the endpoint
// stack.PublishLocalAPIServer publishes.
type SSHHost struct {
	Name, Root, Address string
	Port                int
	// HostKey is the host's own ed25519 key (made for this host), in
	// authorized_keys form.
	HostKey string

	t   *testing.T
	cmd *exec.Cmd
	log string
}

// StartSSHHost prepares root (a debianroot.Fresh root) as host name with
// the logins and starts its sshd on address:port.
func StartSSHHost(t *testing.T, name, root, address string, port int, logins *SSHLogins) *SSHHost {
	t.Helper()
	q := hostssh.Quote
	setup := strings.Join([]string{
		"rm -f /etc/ssh/ssh_host_*",
		"ssh-keygen -q -t ed25519 -N '' -C '' -f /etc/ssh/ssh_host_ed25519_key",
		"install -d -m 0700 /root/.ssh",
		"printf '%s\\n' " + q(logins.rootPub) + " > /root/.ssh/authorized_keys",
		"useradd -m -s /bin/bash " + q(logins.SudoUser),
		"install -d -m 0700 -o " + q(logins.SudoUser) + " /home/" + logins.SudoUser + "/.ssh",
		"printf '%s\\n' " + q(logins.sudoPub) + " > /home/" + logins.SudoUser + "/.ssh/authorized_keys",
		"chown " + q(logins.SudoUser) + " /home/" + logins.SudoUser + "/.ssh/authorized_keys",
		"printf '%s ALL=(ALL) NOPASSWD: ALL\\n' " + q(logins.SudoUser) + " > /etc/sudoers.d/caps-sudo",
		"chmod 0440 /etc/sudoers.d/caps-sudo",
		"useradd -m -s /bin/bash -G sudo " + q(logins.PasswordUser),
		"printf '%s:%s\\n' " + q(logins.PasswordUser) + " " + q(logins.Password) + " | chpasswd",
		"printf 'ListenAddress %s\\nHostKey /etc/ssh/ssh_host_ed25519_key\\nPasswordAuthentication yes\\nPermitRootLogin prohibit-password\\nUseDNS no\\n' " +
			q(net.JoinHostPort(address, strconv.Itoa(port))) + " > /etc/ssh/sshd_config.d/e2e.conf",
		"printf '127.0.1.1 %s\\n' " + q(name) + " >> /etc/hosts",
		"printf '127.0.0.1 %s\\n' " + q(controlplane.APIServerDNSName) + " >> /etc/hosts",
	}, "\n")
	if out, err := debianroot.Run(t, root, nil, setup); err != nil {
		t.Fatalf("prepare SSH host %s: %v\n%s", name, err, out)
	}
	pub, err := os.ReadFile(filepath.Join(root, "etc/ssh/ssh_host_ed25519_key.pub"))
	if err != nil {
		t.Fatal(err)
	}
	h := &SSHHost{Name: name, Root: root, Address: address, Port: port, HostKey: strings.TrimSpace(string(pub)), t: t,
		log: filepath.Join(filepath.Dir(root), name+"-sshd.log")}
	t.Cleanup(h.Stop)
	h.Start()
	return h
}

// Start boots the host's sshd and waits until it accepts connections.
func (h *SSHHost) Start() {
	h.t.Helper()
	if h.cmd != nil {
		h.t.Fatalf("SSH host %s is already running", h.Name)
	}
	const boot = `mount -t proc proc "$1/proc"
mkdir -p "$1/run/sshd"
hostname "$2"
exec chroot "$1" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C /usr/sbin/sshd -D -e`
	log, err := os.OpenFile(h.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		h.t.Fatal(err)
	}
	defer log.Close()
	// --kill-child: when unshare dies, the namespace's PID 1 (sshd) is
	// killed, and with it every process of the host.
	cmd := exec.Command("unshare", "--mount", "--uts", "--ipc", "--pid", "--fork", "--kill-child", "--propagation", "private",
		"bash", "-Eeuo", "pipefail", "-c", boot, "boot", h.Root, h.Name)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		h.t.Fatalf("start sshd of %s: %v", h.Name, err)
	}
	h.cmd = cmd
	addr := net.JoinHostPort(h.Address, strconv.Itoa(h.Port))
	deadline := time.Now().Add(20 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = conn.Close()
			return
		}
		if time.Now().After(deadline) {
			logText, _ := os.ReadFile(h.log)
			h.t.Fatalf("sshd of %s does not accept connections on %s: %v\n%s", h.Name, addr, err, logText)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop kills the host: sshd, its sessions and whatever they started end at
// once (the host's PID namespace dies); its files stay.
func (h *SSHHost) Stop() {
	if h.cmd == nil {
		return
	}
	_ = h.cmd.Process.Kill()
	_ = h.cmd.Wait()
	h.cmd = nil
}

// Logins is how many sessions the host's sshd has accepted since the host
// was first started (its log's "Accepted" lines, which sshd writes for
// every successful authentication).
func (h *SSHHost) Logins() int {
	data, err := os.ReadFile(h.log)
	if err != nil {
		return 0
	}
	return strings.Count(string(data), "Accepted ")
}

// SSHPort is a TCP port free on the loopback addresses of the suite's
// hosts (127.0.0.2 and up), so every host listens on the same port, as on
// a real network, and one SSHCredentials serves them all.
func SSHPort(t testing.TB, hosts int) int {
	t.Helper()
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.2:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		free := true
		for i := 3; i < 2+hosts && free; i++ {
			l, err := net.Listen("tcp", net.JoinHostPort(fmt.Sprintf("127.0.0.%d", i), strconv.Itoa(port)))
			if err != nil {
				free = false
				continue
			}
			_ = l.Close()
		}
		if free {
			return port
		}
	}
	t.Fatal("no port free on every host address")
	return 0
}
