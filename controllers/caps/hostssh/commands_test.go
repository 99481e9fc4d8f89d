package hostssh

import (
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	deckhousev1alpha2 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha2"
)

// hostile are values that would break or subvert a shell if not quoted.
var hostile = []string{
	"", "plain", "with space", "it's", "'", "''", `"double"`, "$(id)", "`id`", "${HOME}", "a;b", "a&&b", "a|b",
	"back\\slash", "new\nline", "tab\tx", "*", "?", "~root", "-n", "--", "!bang", "#hash", "é ü 字", "\x01ctl",
}

// TestQuoteIsOneLiteralWord runs each quoted value through a real shell and
// checks that it comes back byte for byte as one word.
func TestQuoteIsOneLiteralWord(t *testing.T) {
	for _, v := range hostile {
		out, err := exec.Command("sh", "-c", "printf '%s|' "+Quote(v)+"; printf '%s' \"$#\"", "sh").Output()
		if err != nil {
			t.Fatalf("sh with %q: %v", v, err)
		}
		if want := v + "|0"; string(out) != want {
			t.Errorf("Quote(%q) read back by sh as %q, want %q", v, out, want)
		}
	}
}

// fakeSudo is a sudo for the tests: -n true succeeds when NOPASSWD is
// set; -S reads one password line (byte by byte, as sudo does) and fails
// unless it is PASSWORD; then it runs the command after "--".
const fakeSudo = `#!/bin/bash
if [[ "$1" == -n && "$2" == true ]]; then [[ -n "$NOPASSWD" ]]; exit; fi
if [[ "$1" == -S ]]; then
  IFS= read -r got || exit 1
  [[ "$got" == "$PASSWORD" ]] || { echo "sudo: wrong password" >&2; exit 1; }
  shift 3
else
  [[ -n "$NOPASSWD" ]] || { echo "sudo: a password is required" >&2; exit 1; }
  shift 1
fi
[[ "$1" == -- ]] && shift
exec "$@"
`

// runSession runs SessionCommand(c) in a local sh with the fake sudo first
// in PATH, feeding it Stdin(c, script), and returns its output.
func runSession(t *testing.T, c Credentials, script string, env ...string) (string, error) {
	t.Helper()
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "sudo"), []byte(fakeSudo), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", SessionCommand(c))
	cmd.Env = append([]string{"PATH=" + bin + ":" + os.Getenv("PATH")}, env...)
	cmd.Stdin = strings.NewReader(string(Stdin(c, script)))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestSessionPasswordNeverReachesTheScript: with a password, sudo -S gets
// it and the script the rest; under NOPASSWD the password line is dropped
// before sudo, so the script (which echoes all it can read) never sees it.
func TestSessionPasswordNeverReachesTheScript(t *testing.T) {
	const password = "s3cr3t 'pw' $(x)"
	c := Credentials{User: "caps", Password: []byte(password)}
	script := "echo ran as script; cat; echo end\n"
	for _, env := range [][]string{
		{"PASSWORD=" + password},
		{"PASSWORD=" + password, "NOPASSWD=1"},
	} {
		out, err := runSession(t, c, script, env...)
		if err != nil {
			t.Fatalf("session (%v): %v\n%s", env, err, out)
		}
		if !strings.Contains(out, "ran as script") || !strings.Contains(out, "end") {
			t.Errorf("session (%v) did not run the script: %q", env, out)
		}
		if strings.Contains(out, "s3cr3t") {
			t.Errorf("session (%v): the password reached the script: %q", env, out)
		}
	}
	if out, err := runSession(t, c, script, "PASSWORD=other"); err == nil || strings.Contains(out, "ran as script") {
		t.Errorf("a wrong sudo password still ran the script: %v %q", err, out)
	}
}

// TestSessionCommandCarriesNoValue: the command line is one of three fixed
// strings, whatever the credentials hold.
func TestSessionCommandCarriesNoValue(t *testing.T) {
	for _, c := range []Credentials{
		{User: "root", Key: []byte("k")},
		{User: "root", Password: []byte("pw")},
		{User: "caps", Key: []byte("k")},
		{User: "caps", Password: []byte("pw"), Key: []byte("k")},
	} {
		cmd := SessionCommand(c)
		if strings.Contains(cmd, "pw") || strings.Contains(cmd, c.User) {
			t.Errorf("%v: command line %q carries a value", c, cmd)
		}
		stdin := string(Stdin(c, "SCRIPT"))
		if wantPW := c.NeedsSudo() && len(c.Password) > 0; strings.HasPrefix(stdin, "pw\n") != wantPW || !strings.HasSuffix(stdin, "SCRIPT") {
			t.Errorf("%v: stdin %q (password line expected: %v)", c, stdin, wantPW)
		}
	}
	if got := SessionCommand(Credentials{User: "root"}); got != "exec bash -s" {
		t.Errorf("root runs %q, want bash directly", got)
	}
}

// TestBootstrapScriptCarriesTheScriptOpaquely: the bootstrap script comes
// back byte for byte from the here-document, no line of it appears raw,
// and the identity values are quoted.
func TestBootstrapScriptCarriesTheScriptOpaquely(t *testing.T) {
	boot := []byte("#!/usr/bin/env bash\necho 'x' $(id)\nCAPS_BOOTSTRAP_SCRIPT_END\n" + strings.Repeat("y", 200))
	s := BootstrapScript("static://it's", "m;rm -rf /", boot)
	if strings.Contains(s, "echo 'x'") {
		t.Fatalf("the bootstrap script appears raw:\n%s", s)
	}
	start := strings.Index(s, "<<'"+bootstrapDelimiter+"'\n")
	end := strings.Index(s, "\n"+bootstrapDelimiter+"\n")
	if start < 0 || end < 0 {
		t.Fatalf("no here-document in:\n%s", s)
	}
	body := s[start+len("<<'"+bootstrapDelimiter+"'\n") : end]
	got, err := base64.StdEncoding.DecodeString(strings.ReplaceAll(body, "\n", ""))
	if err != nil || string(got) != string(boot) {
		t.Errorf("the here-document decodes to %q (%v), want the bootstrap script", got, err)
	}
	for _, want := range []string{Quote("static://it's") + " > " + Quote(ProviderIDFile+".new"), Quote("m;rm -rf /") + " > " + Quote(MachineNameFile+".new"), `bash "$script" < /dev/null`} {
		if !strings.Contains(s, want) {
			t.Errorf("bootstrap script lacks %q:\n%s", want, s)
		}
	}
	if out, err := exec.Command("bash", "-n", "-c", s).CombinedOutput(); err != nil {
		t.Errorf("bash -n: %v\n%s", err, out)
	}
}

// TestAdoptScriptWritesOnlyIdentity: adoption never runs a bootstrap.
func TestAdoptScriptWritesOnlyIdentity(t *testing.T) {
	s := AdoptScript("static://a", "m")
	if strings.Contains(s, "base64") || strings.Contains(s, "bash ") || strings.Count(s, "mv -f") != 2 {
		t.Errorf("adopt script does more than write the two files:\n%s", s)
	}
	for _, s := range []string{s, CleanupScript(), CleanupIdentityScript()} {
		if out, err := exec.Command("bash", "-n", "-c", s).CombinedOutput(); err != nil {
			t.Errorf("bash -n: %v\n%s\n%s", err, out, s)
		}
	}
}

func TestFromSpec(t *testing.T) {
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	c, err := FromSpec(deckhousev1alpha2.SSHCredentialsSpec{User: "caps", SudoPasswordEncoded: b64("pw"),
		SSHExtraArgs: "-o ConnectTimeout=3 -oServerAliveInterval=5"}, nil)
	if err != nil || c.Port != 22 || string(c.Password) != "pw" || c.ConnectTimeout.Seconds() != 3 || c.KeepAlive.Seconds() != 5 {
		t.Errorf("FromSpec: %+v, %v", c, err)
	}
	if strings.Contains(c.String(), "pw") {
		t.Errorf("Credentials.String shows the password: %s", c)
	}
	for args, want := range map[string]string{
		"-J jump":                 `"-J" is not supported`,
		"-o ProxyCommand=nc":      "ProxyCommand is not supported",
		"-o ConnectTimeout=never": "whole seconds",
	} {
		_, err := FromSpec(deckhousev1alpha2.SSHCredentialsSpec{User: "caps", PrivateSSHKey: b64("k"), SSHExtraArgs: args}, nil)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("sshExtraArgs %q: error %v, want one saying %q", args, err, want)
		}
	}
	for _, spec := range []deckhousev1alpha2.SSHCredentialsSpec{
		{User: "caps"},
		{User: "caps", SudoPasswordEncoded: "not base64 secret!"},
		{User: "caps", SudoPasswordEncoded: b64("two\nlines")},
	} {
		_, err := FromSpec(spec, nil)
		if err == nil || strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), "two") {
			t.Errorf("FromSpec(%+v): error %v; want one that names the field, not the value", spec, err)
		}
	}
}

// TestFromSpecReadsSecrets: the Secret references are read as is (not
// base64 again), with the default keys of Secrets of type
// kubernetes.io/ssh-auth and kubernetes.io/basic-auth, and win over
// nothing else: errors name the Secret and the key, never a value.
func TestFromSpecReadsSecrets(t *testing.T) {
	secrets := map[string]map[string]string{
		"host-a": {deckhousev1.SSHPrivateKeySecretKey: "PEM KEY", deckhousev1.SSHPasswordSecretKey: "pw\n"},
		"other":  {"sudo": "secret two\nlines"},
	}
	read := func(name, key string) ([]byte, error) {
		v, ok := secrets[name][key]
		if !ok {
			return nil, fmt.Errorf("Secret %s has no key %s", name, key)
		}
		return []byte(v), nil
	}
	c, err := FromSpec(deckhousev1alpha2.SSHCredentialsSpec{User: "caps",
		PrivateSSHKeySecretRef: &deckhousev1alpha2.SSHCredentialsSecretRef{Name: "host-a"},
		SudoPasswordSecretRef:  &deckhousev1alpha2.SSHCredentialsSecretRef{Name: "host-a"}}, read)
	if err != nil || string(c.Key) != "PEM KEY" || string(c.Password) != "pw" {
		t.Errorf("FromSpec with Secret references: key %q, password %q, %v; want the Secret's values, the password's final line break dropped", c.Key, c.Password, err)
	}
	for _, spec := range []deckhousev1alpha2.SSHCredentialsSpec{
		{User: "caps", PrivateSSHKeySecretRef: &deckhousev1alpha2.SSHCredentialsSecretRef{Name: "missing"}},
		{User: "caps", SudoPasswordSecretRef: &deckhousev1alpha2.SSHCredentialsSecretRef{Name: "other", Key: "sudo"}},
	} {
		_, err := FromSpec(spec, read)
		if err == nil || strings.Contains(err.Error(), "secret two") || !strings.Contains(err.Error(), "SecretRef") {
			t.Errorf("FromSpec(%+v): error %v; want one that names the field, not the value", spec, err)
		}
	}
	if _, err := FromSpec(deckhousev1alpha2.SSHCredentialsSpec{User: "caps",
		PrivateSSHKeySecretRef: &deckhousev1alpha2.SSHCredentialsSecretRef{Name: "host-a"}}, nil); err == nil {
		t.Error("FromSpec without a Secret reader accepted a Secret reference")
	}
}
