package hostssh

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
)

// Host is where a session goes and which host key it trusts.
type Host struct {
	// Address is the host's IP address; the port comes from Credentials.
	Address string
	// PinnedKey is the host key the host must present, in authorized_keys
	// form ("ssh-ed25519 AAAA...").
	PinnedKey string
	// TrustOnFirstUse, with no PinnedKey, accepts the key the host shows
	// (returned in Result.HostKey for the caller to pin): an admin's
	// explicit choice. Without either, Run refuses before it dials.
	TrustOnFirstUse bool
}

// Result is what a session produced. Output is the session's stdout and
// stderr together, kept for the caller's judgement: it comes from the
// host's scripts and may hold anything, so the callers here never put it
// in a log, an event or a condition.
type Result struct {
	ExitCode int
	HostKey  string
	Output   []byte
}

// ErrHostKeyMismatch is returned when the host presents a key other than
// the pinned one.
var ErrHostKeyMismatch = errors.New("the host presented a different SSH host key than the one pinned in its StaticInstance")

// ErrHostKeyNotPinned is returned, before any connection, for a host with
// no pinned key whose trust on first use was not allowed: no password and
// no script goes to a host CAPS cannot tell from an impostor.
var ErrHostKeyNotPinned = errors.New("the host's SSH key is not pinned and trust on first use is not allowed for it")

// Error is a failure to reach or log in to a host (as opposed to a script
// that ran and exited non-zero: Result.ExitCode). Its text names the host
// and the stage, and carries the SSH library's reason, which never
// includes credentials.
type Error struct {
	Host  string
	Stage string // "hostkey", "credentials", "connect", "handshake", "session"
	Err   error
}

func (e *Error) Error() string { return fmt.Sprintf("ssh %s: %s: %v", e.Host, e.Stage, e.Err) }
func (e *Error) Unwrap() error { return e.Err }

// maxOutput bounds what a session's output keeps (its tail).
const maxOutput = 64 << 10

// Run logs in to h with c and runs script as root (SessionCommand), giving
// it Stdin(c, script). It returns when the script ends, the connection
// drops (an *Error), or ctx ends (the session is closed, which ends the
// remote shell).
func Run(ctx context.Context, h Host, c Credentials, script string) (Result, error) {
	addr := net.JoinHostPort(h.Address, strconv.Itoa(c.Port))
	if strings.TrimSpace(h.PinnedKey) == "" && !h.TrustOnFirstUse {
		return Result{}, &Error{Host: addr, Stage: "hostkey", Err: ErrHostKeyNotPinned}
	}
	cfg, seen, err := clientConfig(h, c)
	if err != nil {
		return Result{}, &Error{Host: addr, Stage: "credentials", Err: err}
	}
	dialer := net.Dialer{Timeout: c.ConnectTimeout}
	conn, err := dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return Result{}, &Error{Host: addr, Stage: "connect", Err: err}
	}
	_ = conn.SetDeadline(time.Now().Add(c.ConnectTimeout))
	sconn, chans, reqs, err := ssh.NewClientConn(conn, addr, cfg)
	if err != nil {
		_ = conn.Close()
		for _, known := range []error{ErrHostKeyMismatch, ErrHostKeyNotPinned} {
			if errors.Is(err, known) {
				return Result{HostKey: *seen}, &Error{Host: addr, Stage: "handshake", Err: known}
			}
		}
		return Result{HostKey: *seen}, &Error{Host: addr, Stage: "handshake", Err: err}
	}
	_ = conn.SetDeadline(time.Time{})
	client := ssh.NewClient(sconn, chans, reqs)
	defer func() { _ = client.Close() }()
	res := Result{HostKey: *seen}

	session, err := client.NewSession()
	if err != nil {
		return res, &Error{Host: addr, Stage: "session", Err: err}
	}
	defer func() { _ = session.Close() }()
	out := &tailBuffer{max: maxOutput}
	session.Stdout, session.Stderr = out, out
	session.Stdin = bytes.NewReader(Stdin(c, script))

	done := make(chan error, 1)
	go func() { done <- session.Run(SessionCommand(c)) }()
	var keepAlive <-chan time.Time
	if c.KeepAlive > 0 {
		t := time.NewTicker(c.KeepAlive)
		defer t.Stop()
		keepAlive = t.C
	}
	for {
		select {
		case err := <-done:
			res.Output = out.Bytes()
			var exit *ssh.ExitError
			switch {
			case err == nil:
				return res, nil
			case errors.As(err, &exit):
				res.ExitCode = exit.ExitStatus()
				return res, nil
			default:
				return res, &Error{Host: addr, Stage: "session", Err: err}
			}
		case <-keepAlive:
			if _, _, err := client.SendRequest("keepalive@openssh.com", true, nil); err != nil {
				_ = client.Close()
			}
		case <-ctx.Done():
			_ = client.Close()
			<-done
			res.Output = out.Bytes()
			return res, &Error{Host: addr, Stage: "session", Err: ctx.Err()}
		}
	}
}

// clientConfig is the SSH client configuration: the login methods of c and
// the host key policy of h. seen receives the host key the server shows.
//
// With a key, the key is the only login method: the password is for sudo
// alone and is never offered as a login password, so a host that refuses
// the key (an impostor that passed the host key check on first use, or a
// host whose authorized_keys changed) never receives it. The SSH library
// checks the host key before any login method runs.
func clientConfig(h Host, c Credentials) (*ssh.ClientConfig, *string, error) {
	var auth []ssh.AuthMethod
	if len(c.Key) > 0 {
		signer, err := ssh.ParsePrivateKey(c.Key)
		if err != nil {
			// The parser's message may quote the key's header; say only what failed.
			return nil, nil, errors.New("the private key is not a private key in PEM form (or it is protected by a passphrase)")
		}
		auth = append(auth, ssh.PublicKeys(signer))
	} else if len(c.Password) > 0 {
		password := string(c.Password)
		auth = append(auth, ssh.Password(password))
		auth = append(auth, ssh.KeyboardInteractive(func(_, _ string, questions []string, _ []bool) ([]string, error) {
			answers := make([]string, len(questions))
			for i := range answers {
				answers[i] = password
			}
			return answers, nil
		}))
	}
	seen := new(string)
	cfg := &ssh.ClientConfig{
		User:    c.User,
		Auth:    auth,
		Timeout: c.ConnectTimeout,
		HostKeyCallback: func(_ string, _ net.Addr, key ssh.PublicKey) error {
			*seen = FormatKey(key)
			switch {
			case strings.TrimSpace(h.PinnedKey) != "":
				if *seen != normalizeKey(h.PinnedKey) {
					return ErrHostKeyMismatch
				}
			case !h.TrustOnFirstUse:
				return ErrHostKeyNotPinned
			}
			return nil
		},
	}
	if strings.TrimSpace(h.PinnedKey) != "" {
		pinned, _, _, _, err := ssh.ParseAuthorizedKey([]byte(h.PinnedKey))
		if err != nil {
			return nil, nil, fmt.Errorf("the pinned host key is not in authorized_keys form (\"ssh-ed25519 AAAA...\"): %w", err)
		}
		// Ask for the pinned key's type only, or a server offering another
		// type first would look like a changed key.
		cfg.HostKeyAlgorithms = hostKeyAlgorithms(pinned.Type())
	}
	return cfg, seen, nil
}

// hostKeyAlgorithms are the signature algorithms a key of type t can make.
func hostKeyAlgorithms(t string) []string {
	if t == ssh.KeyAlgoRSA {
		return []string{ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA}
	}
	return []string{t}
}

// FormatKey is key in authorized_keys form, without a comment.
func FormatKey(key ssh.PublicKey) string {
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(key)))
}

// normalizeKey drops the comment and surrounding space of an
// authorized_keys line; an unparsable one is returned as is (and will not match).
func normalizeKey(s string) string {
	key, _, _, _, err := ssh.ParseAuthorizedKey([]byte(s))
	if err != nil {
		return strings.TrimSpace(s)
	}
	return FormatKey(key)
}

// tailBuffer keeps the last max bytes written to it.
// The SSH library copies stdout and stderr from two goroutines.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) Bytes() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]byte(nil), t.buf...)
}

var _ io.Writer = (*tailBuffer)(nil)
