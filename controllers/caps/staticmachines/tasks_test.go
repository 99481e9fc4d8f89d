package staticmachines

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/node-manager/node-manager/controllers/caps/hostssh"
)

// TestTasksOnePerHost: a second operation on a host that is busy is not
// started; the result is kept until forgotten and reported only for its
// kind; the end calls done with the host's key.
func TestTasksOnePerHost(t *testing.T) {
	done := make(chan string, 4)
	tk := newTasks(func() time.Time { return t0 }, func(key string) { done <- key })
	release := make(chan struct{})
	started := tk.start(context.Background(), "host-1", taskBootstrap, func(context.Context) (hostssh.Result, error) {
		<-release
		return hostssh.Result{HostKey: "ssh-ed25519 AAAA"}, nil
	})
	if !started {
		t.Fatal("the first operation did not start")
	}
	if tk.start(context.Background(), "host-1", taskCleanup, func(context.Context) (hostssh.Result, error) { return hostssh.Result{}, nil }) {
		t.Error("a second operation started on a busy host")
	}
	if o, _, _, _ := tk.state("host-1", taskCleanup); o != outcomeRunning {
		t.Errorf("a busy host reports %v for another kind, want running", o)
	}
	close(release)
	if key := <-done; key != "host-1" {
		t.Errorf("done called with %q", key)
	}
	if o, at, _, hostKey := tk.state("host-1", taskBootstrap); o != outcomeSucceeded || !at.Equal(t0) || hostKey != "ssh-ed25519 AAAA" {
		t.Errorf("state after success: %v %v %q", o, at, hostKey)
	}
	if o, _, _, _ := tk.state("host-1", taskCleanup); o != outcomeNone {
		t.Errorf("a bootstrap's result is reported for cleanup: %v", o)
	}
	if got := tk.seenHostKey("host-1"); got != "ssh-ed25519 AAAA" {
		t.Errorf("the host key seen by a finished operation of any kind: %q", got)
	}
	tk.forget("host-1")
	if o, _, _, _ := tk.state("host-1", taskBootstrap); o != outcomeNone {
		t.Errorf("a forgotten result is still reported: %v", o)
	}
}

func TestClassify(t *testing.T) {
	for _, c := range []struct {
		res  hostssh.Result
		err  error
		want outcome
		msg  string
	}{
		{hostssh.Result{}, nil, outcomeSucceeded, ""},
		{hostssh.Result{ExitCode: 1, Output: []byte("token abc.def")}, nil, outcomeFailed, "the bootstrap script exited with code 1"},
		{hostssh.Result{}, &hostssh.Error{Host: "192.0.2.1:22", Stage: "handshake", Err: hostssh.ErrHostKeyMismatch}, outcomeRefused, "another SSH host key"},
		{hostssh.Result{}, &hostssh.Error{Host: "192.0.2.1:22", Stage: "handshake", Err: errors.New("ssh: handshake failed: ssh: unable to authenticate, attempted methods [none password]")},
			outcomeRefused, "refused the login"},
		{hostssh.Result{}, &hostssh.Error{Host: "192.0.2.1:22", Stage: "credentials", Err: errors.New("spec.privateSSHKey is not a private key in PEM form")}, outcomeRefused, "cannot be used"},
		{hostssh.Result{}, &hostssh.Error{Host: "192.0.2.1:22", Stage: "connect", Err: errors.New("connection refused")}, outcomeFailed, "connection refused"},
		{hostssh.Result{}, &hostssh.Error{Host: "192.0.2.1:22", Stage: "session", Err: errors.New("EOF")}, outcomeFailed, "EOF"},
	} {
		o, msg := classify(taskBootstrap, c.res, c.err)
		if o != c.want || !strings.Contains(msg, c.msg) || strings.Contains(msg, "abc.def") {
			t.Errorf("classify(%v, %v) = %v %q; want %v with %q and never the output", c.res.ExitCode, c.err, o, msg, c.want, c.msg)
		}
	}
}
