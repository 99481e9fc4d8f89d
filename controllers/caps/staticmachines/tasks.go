package staticmachines

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/node-manager/node-manager/controllers/caps/hostssh"
)

// tasks runs the SSH operations, which take minutes, off the work queue:
// at most one per StaticInstance (keyed by its name, not by the host: two
// instances naming one host by different addresses are two keys) within
// this process's term of leadership; a new term may start another while the
// last term's script still runs on the host. It keeps how the last one of
// each instance ended until sync has used it. When one ends, done is called
// with the instance's key, so its machine is synced at once.
type tasks struct {
	mu    sync.Mutex
	byKey map[string]*task
	done  func(key string)
	now   func() time.Time
}

type task struct {
	kind     taskKind
	running  bool
	outcome  outcome
	message  string
	finished time.Time
	hostKey  string
}

func newTasks(now func() time.Time, done func(key string)) *tasks {
	return &tasks{byKey: map[string]*task{}, done: done, now: now}
}

// state is how the host's last operation of kind ended (outcomeNone when
// none has run, or the last one was of another kind), when, what it says,
// and the host key it saw.
func (t *tasks) state(key string, kind taskKind) (o outcome, finished time.Time, message, hostKey string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tk := t.byKey[key]
	if tk == nil || tk.kind != kind {
		if tk != nil && tk.running {
			return outcomeRunning, time.Time{}, "", ""
		}
		return outcomeNone, time.Time{}, "", ""
	}
	if tk.running {
		return outcomeRunning, time.Time{}, "", tk.hostKey
	}
	return tk.outcome, tk.finished, tk.message, tk.hostKey
}

// seenHostKey is the host key the last finished operation on key saw,
// whatever its kind ("" when none has finished): a bootstrap may end after
// its phase has moved on, and its host key is still to be pinned.
func (t *tasks) seenHostKey(key string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if tk := t.byKey[key]; tk != nil && !tk.running {
		return tk.hostKey
	}
	return ""
}

// start runs op for key in the background unless an operation of key is
// running; it reports whether it started one.
func (t *tasks) start(ctx context.Context, key string, kind taskKind, op func(context.Context) (hostssh.Result, error)) bool {
	t.mu.Lock()
	if tk := t.byKey[key]; tk != nil && tk.running {
		t.mu.Unlock()
		return false
	}
	tk := &task{kind: kind, running: true}
	t.byKey[key] = tk
	t.mu.Unlock()
	go func() {
		res, err := op(ctx)
		o, msg := classify(kind, res, err)
		t.mu.Lock()
		tk.running, tk.outcome, tk.message, tk.finished, tk.hostKey = false, o, msg, t.now(), res.HostKey
		t.mu.Unlock()
		t.done(key)
	}()
	return true
}

// forget drops what is known of key's operations (the host was released).
// A running operation is left to finish; its result is then dropped too.
func (t *tasks) forget(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if tk := t.byKey[key]; tk != nil && !tk.running {
		delete(t.byKey, key)
	}
}

// classify turns an operation's end into an outcome and a message for the
// instance's condition. The message names the stage and the exit code or
// the SSH library's reason, never the script's output (which may hold
// anything the host printed) nor a credential.
func classify(kind taskKind, res hostssh.Result, err error) (outcome, string) {
	var sshErr *hostssh.Error
	switch {
	case err == nil && res.ExitCode == 0:
		return outcomeSucceeded, ""
	case err == nil:
		return outcomeFailed, fmt.Sprintf("the %s script exited with code %d", kind, res.ExitCode)
	case errors.Is(err, hostssh.ErrHostKeyMismatch):
		return outcomeRefused, "the host presented another SSH host key than the one in the annotation static.node.deckhouse.io/ssh-host-key; if the host was reinstalled, remove or correct the annotation"
	case errors.Is(err, hostssh.ErrHostKeyNotPinned):
		return outcomeRefused, "the host's SSH key is not pinned and trust on first use is not allowed for this instance: it was not contacted"
	case errors.As(err, &sshErr) && sshErr.Stage == "credentials":
		return outcomeRefused, "the SSHCredentials cannot be used: " + sshErr.Err.Error()
	case errors.As(err, &sshErr) && sshErr.Stage == "handshake" && strings.Contains(sshErr.Err.Error(), "unable to authenticate"):
		return outcomeRefused, fmt.Sprintf("ssh %s: the host refused the login of the SSHCredentials (wrong user, key or password)", sshErr.Host)
	default:
		return outcomeFailed, err.Error()
	}
}
