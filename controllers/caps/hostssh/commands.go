package hostssh

import (
	"encoding/base64"
	"strconv"
	"strings"
)

// The files on a host that tie it to its machine, as Deckhouse names them:
// bashible gives the kubelet the provider id, and the machine name tells
// the node which Machine it is.
const (
	BashibleDir       = "/var/lib/bashible"
	ProviderIDFile    = "/var/lib/bashible/node-spec-provider-id"
	MachineNameFile   = "/var/lib/bashible/machine-name"
	CleanupScriptFile = "/var/lib/bashible/cleanup_static_node.sh"
	// CleanupFlag is what cleanup_static_node.sh wants to hear before it wipes.
	CleanupFlag = "--yes-i-am-sane-and-i-understand-what-i-am-doing"
)

// Exit codes the scripts below use for outcomes the caller tells apart.
const (
	// ExitNoCleanupScript: the host has no cleanup_static_node.sh (it was
	// never bootstrapped by a bundle that writes it, or already cleaned).
	ExitNoCleanupScript = 90
)

// Quote makes s one word of a POSIX shell, whatever it contains: it is
// wrapped in single quotes, and each single quote in it becomes '\”.
func Quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// SessionCommand is the command line of a session: it starts, as root,
// a bash that reads the script from stdin. It holds no value from the
// cluster, so nothing secret or foreign ever reaches a command line.
//
// For a user other than root it goes through sudo. With a password, the
// first line of stdin is that password (Stdin): when sudo needs none (the
// user has NOPASSWD, checked with sudo -n), the login shell reads and drops
// that line before sudo starts, so the password never reaches the script;
// otherwise sudo -S reads it (byte by byte, up to the line end) and bash
// reads the rest.
func SessionCommand(c Credentials) string {
	switch {
	case !c.NeedsSudo():
		return "exec bash -s"
	case len(c.Password) == 0:
		return "exec sudo -n -- bash -s"
	default:
		return "if sudo -n true 2>/dev/null; then IFS= read -r _ && exec sudo -n -- bash -s; " +
			"else exec sudo -S -p '' -- bash -s; fi"
	}
}

// Stdin is what a session with SessionCommand(c) reads: the sudo password
// line when the command expects it, then the script.
func Stdin(c Credentials, script string) []byte {
	var b strings.Builder
	if c.NeedsSudo() && len(c.Password) > 0 {
		b.Write(c.Password)
		b.WriteByte('\n')
	}
	b.WriteString(script)
	return []byte(b.String())
}

// scriptHeader starts every script: strict, private files.
const scriptHeader = "set -Eeuo pipefail\numask 077\n"

// writeIdentity writes the provider id and machine name files, each
// replaced whole.
func writeIdentity(b *strings.Builder, providerID, machineName string) {
	b.WriteString("mkdir -p " + Quote(BashibleDir) + "\n")
	for _, f := range []struct{ path, value string }{{ProviderIDFile, providerID}, {MachineNameFile, machineName}} {
		b.WriteString("printf '%s\\n' " + Quote(f.value) + " > " + Quote(f.path+".new") + "\n")
		b.WriteString("chmod 0644 " + Quote(f.path+".new") + "\n")
		b.WriteString("mv -f " + Quote(f.path+".new") + " " + Quote(f.path) + "\n")
	}
}

// AdoptScript writes only the two identity files: the host already is a
// node, and its bashible carries on.
func AdoptScript(providerID, machineName string) string {
	var b strings.Builder
	b.WriteString(scriptHeader)
	writeIdentity(&b, providerID, machineName)
	return b.String()
}

// bootstrapDelimiter ends the here-document holding the bootstrap script;
// base64 text can never contain it.
const bootstrapDelimiter = "CAPS_BOOTSTRAP_SCRIPT_END"

// BootstrapScript writes the identity files, then the group's bootstrap
// script (the manual-bootstrap script of its Machine's data Secret) to a
// root-only temporary file, and runs it with stdin closed, so it cannot
// read the rest of the session. The bootstrap script travels base64-encoded
// inside a quoted here-document: no byte of it is interpreted by the shell
// that writes it. Running it again after an interruption is what the
// manual-bootstrap script is made for: it leaves a host bashible already
// runs alone and otherwise starts over with a fresh token.
func BootstrapScript(providerID, machineName string, bootstrap []byte) string {
	var b strings.Builder
	b.WriteString(scriptHeader)
	writeIdentity(&b, providerID, machineName)
	b.WriteString("script=$(mktemp " + Quote(BashibleDir+"/caps-bootstrap.XXXXXX") + ")\n")
	b.WriteString("trap 'rm -f \"$script\"' EXIT\n")
	b.WriteString("base64 -d > \"$script\" <<'" + bootstrapDelimiter + "'\n")
	enc := base64.StdEncoding.EncodeToString(bootstrap)
	for len(enc) > 76 {
		b.WriteString(enc[:76] + "\n")
		enc = enc[76:]
	}
	if enc != "" {
		b.WriteString(enc + "\n")
	}
	b.WriteString(bootstrapDelimiter + "\n")
	b.WriteString("bash \"$script\" < /dev/null\n")
	return b.String()
}

// CleanupScript runs the host's cleanup_static_node.sh, which the bundle
// of Static groups installs, or exits ExitNoCleanupScript when there is
// none. (Deckhouse then removes /var/lib/bashible and reboots; here the
// caller decides: a host without the script was never configured by a
// bundle, so there is nothing of node-manager's to remove but the
// identity files, which CleanupIdentityScript removes.)
func CleanupScript() string {
	var b strings.Builder
	b.WriteString(scriptHeader)
	b.WriteString("if [[ ! -x " + Quote(CleanupScriptFile) + " ]]; then exit " + strconv.Itoa(ExitNoCleanupScript) + "; fi\n")
	b.WriteString("exec " + Quote(CleanupScriptFile) + " " + Quote(CleanupFlag) + " < /dev/null\n")
	return b.String()
}

// CleanupIdentityScript removes what CAPS itself wrote to a host that has
// no cleanup script: the identity files, and the directory if it is empty.
func CleanupIdentityScript() string {
	var b strings.Builder
	b.WriteString(scriptHeader)
	b.WriteString("rm -f " + Quote(ProviderIDFile) + " " + Quote(MachineNameFile) + "\n")
	b.WriteString("rmdir " + Quote(BashibleDir) + " 2> /dev/null || true\n")
	return b.String()
}
