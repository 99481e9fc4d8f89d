// Package hostssh is how Cluster API Provider Static reaches a host: one
// SSH session per operation (bootstrap, adoption, cleanup), with key or
// password login, sudo when the user is not root, and a pinned host key.
//
// What it sends to the remote side is built here and nowhere else, and
// every value that reaches a remote shell is single-quoted (Quote). Secrets
// travel only on the session's stdin: the sudo password as the first line
// (read by sudo -S, or discarded when sudo needs none), then the script,
// which bash reads from stdin. Nothing secret is ever part of a command
// line (visible in ps and sshd's logs), and errors returned from here name
// the host and what failed, never a key, a password or the script.
package hostssh

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha2 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha2"
)

// Credentials are a decoded SSHCredentials. Its String method hides the
// secrets, so a Credentials value may be logged.
type Credentials struct {
	User string
	// Key is the private key (PEM); Password logs in when there is no key,
	// and is given to sudo.
	Key      []byte
	Password []byte
	Port     int
	// ConnectTimeout bounds the TCP connection and the handshake.
	ConnectTimeout time.Duration
	// KeepAlive sends a keepalive request this often while a session runs
	// (0: never), so a host that vanished fails the session.
	KeepAlive time.Duration
}

// DefaultConnectTimeout applies when sshExtraArgs sets no ConnectTimeout.
const DefaultConnectTimeout = 10 * time.Second

// String names the user and port only.
func (c Credentials) String() string {
	return fmt.Sprintf("%s@:%d (key: %t, password: %t)", c.User, c.Port, len(c.Key) > 0, len(c.Password) > 0)
}

// NeedsSudo reports whether commands must go through sudo.
func (c Credentials) NeedsSudo() bool { return c.User != "root" }

// SecretReader reads one key of a Secret of the namespace
// deckhousev1.SSHCredentialsNamespace. Its errors name the Secret and the
// key, never a value.
type SecretReader func(name, key string) ([]byte, error)

// FromSpec decodes an SSHCredentials spec, reading the Secrets it names
// with read (nil: a spec that names a Secret is an error). Its errors name
// the field, never its value.
func FromSpec(spec deckhousev1alpha2.SSHCredentialsSpec, read SecretReader) (Credentials, error) {
	c := Credentials{User: spec.User, Port: int(spec.SSHPort), ConnectTimeout: DefaultConnectTimeout}
	if c.Port == 0 {
		c.Port = 22
	}
	if c.User == "" {
		return Credentials{}, errors.New("spec.user is empty")
	}
	var err error
	switch {
	case spec.PrivateSSHKeySecretRef != nil:
		if c.Key, err = fromSecret(read, "spec.privateSSHKeySecretRef", spec.PrivateSSHKeySecretRef, deckhousev1.SSHPrivateKeySecretKey); err != nil {
			return Credentials{}, err
		}
	case spec.PrivateSSHKey != "":
		if c.Key, err = base64.StdEncoding.DecodeString(strings.TrimSpace(spec.PrivateSSHKey)); err != nil {
			return Credentials{}, errors.New("spec.privateSSHKey is not valid base64 (it must be the PEM key, base64-encoded)")
		}
	}
	switch {
	case spec.SudoPasswordSecretRef != nil:
		if c.Password, err = fromSecret(read, "spec.sudoPasswordSecretRef", spec.SudoPasswordSecretRef, deckhousev1.SSHPasswordSecretKey); err != nil {
			return Credentials{}, err
		}
		// A password file written with a final line break is meant without it.
		c.Password = []byte(strings.TrimRight(string(c.Password), "\r\n"))
		if strings.ContainsAny(string(c.Password), "\n\r") {
			return Credentials{}, errors.New("spec.sudoPasswordSecretRef names a password with a line break, which sudo -S cannot read")
		}
	case spec.SudoPasswordEncoded != "":
		if c.Password, err = base64.StdEncoding.DecodeString(strings.TrimSpace(spec.SudoPasswordEncoded)); err != nil {
			return Credentials{}, errors.New("spec.sudoPasswordEncoded is not valid base64")
		}
		if strings.ContainsAny(string(c.Password), "\n\r") {
			return Credentials{}, errors.New("spec.sudoPasswordEncoded decodes to a password with a line break, which sudo -S cannot read")
		}
	}
	if len(c.Key) == 0 && len(c.Password) == 0 {
		return Credentials{}, errors.New("no private key (spec.privateSSHKeySecretRef or spec.privateSSHKey) and no password (spec.sudoPasswordSecretRef or spec.sudoPasswordEncoded) is set")
	}
	if err := c.applyExtraArgs(spec.SSHExtraArgs); err != nil {
		return Credentials{}, err
	}
	return c, nil
}

// fromSecret reads the key of ref (def when it names none), which must not be empty.
func fromSecret(read SecretReader, field string, ref *deckhousev1alpha2.SSHCredentialsSecretRef, def string) ([]byte, error) {
	key := ref.Key
	if key == "" {
		key = def
	}
	if read == nil {
		return nil, fmt.Errorf("%s: Secrets cannot be read here", field)
	}
	v, err := read(ref.Name, key)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	if len(v) == 0 {
		return nil, fmt.Errorf("%s: key %s of Secret %s/%s is empty", field, key, deckhousev1.SSHCredentialsNamespace, ref.Name)
	}
	return v, nil
}

// applyExtraArgs understands the OpenSSH options that make sense for this
// client: -o ConnectTimeout=<s> and -o ServerAliveInterval=<s> (also as
// -oName=value, and "Name value" after -o). Anything else is an error
// naming it: silently ignoring an option a person relies on (a proxy, a
// cipher) would be worse than refusing.
func (c *Credentials) applyExtraArgs(args string) error {
	fields := strings.Fields(args)
	for i := 0; i < len(fields); i++ {
		arg := fields[i]
		var opt string
		switch {
		case arg == "-o" && i+1 < len(fields):
			i++
			opt = fields[i]
		case strings.HasPrefix(arg, "-o") && len(arg) > 2:
			opt = arg[2:]
		default:
			return fmt.Errorf("spec.sshExtraArgs: %q is not supported; only -o ConnectTimeout=<seconds> and -o ServerAliveInterval=<seconds> are", arg)
		}
		name, value, ok := strings.Cut(opt, "=")
		if !ok && i+1 < len(fields) && !strings.HasPrefix(fields[i+1], "-") {
			i++
			name, value, ok = opt, fields[i], true
		}
		if !ok {
			return fmt.Errorf("spec.sshExtraArgs: option %q has no value", opt)
		}
		lower := strings.ToLower(name)
		if lower != "connecttimeout" && lower != "serveraliveinterval" {
			return fmt.Errorf("spec.sshExtraArgs: option %s is not supported; only ConnectTimeout and ServerAliveInterval are", name)
		}
		seconds, err := strconv.Atoi(value)
		if err != nil || seconds < 0 || seconds > 3600 {
			return fmt.Errorf("spec.sshExtraArgs: %s wants whole seconds from 0 to 3600, not %q", name, value)
		}
		switch lower {
		case "connecttimeout":
			if seconds > 0 {
				c.ConnectTimeout = time.Duration(seconds) * time.Second
			}
		default:
			c.KeepAlive = time.Duration(seconds) * time.Second
		}
	}
	return nil
}
