package hostssh

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// fakeHost is an SSH server on loopback that refuses every login and
// records what it was offered: how many connections it accepted, and every
// password (as a login password or a keyboard-interactive answer).
type fakeHost struct {
	addr    string
	port    int
	hostKey string

	mu          sync.Mutex
	connections int
	passwords   []string
	keysOffered int
}

func startFakeHost(t *testing.T) *fakeHost {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	h := &fakeHost{hostKey: FormatKey(signer.PublicKey())}
	cfg := &ssh.ServerConfig{
		PublicKeyCallback: func(_ ssh.ConnMetadata, _ ssh.PublicKey) (*ssh.Permissions, error) {
			h.mu.Lock()
			h.keysOffered++
			h.mu.Unlock()
			return nil, errors.New("key refused")
		},
		PasswordCallback: func(_ ssh.ConnMetadata, password []byte) (*ssh.Permissions, error) {
			h.mu.Lock()
			h.passwords = append(h.passwords, string(password))
			h.mu.Unlock()
			return nil, errors.New("password refused")
		},
		KeyboardInteractiveCallback: func(_ ssh.ConnMetadata, challenge ssh.KeyboardInteractiveChallenge) (*ssh.Permissions, error) {
			answers, err := challenge("", "", []string{"Password: "}, []bool{false})
			h.mu.Lock()
			h.passwords = append(h.passwords, answers...)
			h.mu.Unlock()
			if err != nil {
				return nil, err
			}
			return nil, errors.New("password refused")
		},
	}
	cfg.AddHostKey(signer)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	h.addr = "127.0.0.1"
	h.port = l.Addr().(*net.TCPAddr).Port
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			h.mu.Lock()
			h.connections++
			h.mu.Unlock()
			go func() {
				defer func() { _ = conn.Close() }()
				_, _, _, _ = ssh.NewServerConn(conn, cfg)
			}()
		}
	}()
	return h
}

func (h *fakeHost) seen() (connections int, passwords []string, keys int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.connections, append([]string(nil), h.passwords...), h.keysOffered
}

func clientKey(t *testing.T) []byte {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(block)
}

// TestAHostThatRefusesTheKeyGetsNoPassword (issue 35, item 5): credentials
// with a key and a sudo password log in with the key only. A host that
// refuses the key, whether its key was pinned or trusted on first use,
// never receives the password (as a login password or a
// keyboard-interactive answer): the password is for sudo, on a host that
// accepted the key.
func TestAHostThatRefusesTheKeyGetsNoPassword(t *testing.T) {
	h := startFakeHost(t)
	const password = "the-sudo-password"
	creds := Credentials{User: "caps", Key: clientKey(t), Password: []byte(password), Port: h.port, ConnectTimeout: 5 * time.Second}
	for name, host := range map[string]Host{
		"pinned":               {Address: h.addr, PinnedKey: h.hostKey},
		"trusted on first use": {Address: h.addr, PinnedKey: "", TrustOnFirstUse: true},
	} {
		_, err := Run(context.Background(), host, creds, "echo never\n")
		if err == nil || !strings.Contains(err.Error(), "unable to authenticate") {
			t.Fatalf("%s: want the login refused, got %v", name, err)
		}
		if strings.Contains(err.Error(), password) {
			t.Errorf("%s: the error holds the password: %v", name, err)
		}
	}
	connections, passwords, keys := h.seen()
	if connections != 2 || keys == 0 {
		t.Fatalf("the host saw %d connections and %d key offers, want 2 connections offering the key", connections, keys)
	}
	if len(passwords) > 0 {
		t.Errorf("a host that refused the key received %d password attempts (%q): the sudo password went to it as a login password", len(passwords), passwords)
	}
}

// TestAnUnpinnedHostIsNeverContacted (issue 35, item 5): without a pinned
// host key and without an admin's leave to trust on first use, Run fails
// before it dials: the host sees no connection, let alone a password or a
// script.
func TestAnUnpinnedHostIsNeverContacted(t *testing.T) {
	h := startFakeHost(t)
	creds := Credentials{User: "caps", Password: []byte("the-password"), Port: h.port, ConnectTimeout: 5 * time.Second}
	_, err := Run(context.Background(), Host{Address: h.addr}, creds, "echo never\n")
	if err == nil || !strings.Contains(err.Error(), "not pinned") {
		t.Errorf("an unpinned host: want a refusal saying the key is not pinned, got %v", err)
	}
	var sshErr *Error
	if !errors.As(err, &sshErr) || !errors.Is(err, ErrHostKeyNotPinned) {
		t.Errorf("an unpinned host: want an *Error wrapping ErrHostKeyNotPinned, got %#v", err)
	}
	if connections, passwords, _ := h.seen(); connections != 0 || len(passwords) != 0 {
		t.Errorf("an unpinned host was contacted: %d connections, %d passwords", connections, len(passwords))
	}
}
