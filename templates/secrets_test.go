package templates

import (
	"encoding/base64"
	"strings"
	"testing"
)

const (
	plantedUser     = "robot-puller"
	plantedPassword = "Pl4nted-Secr3t"
	plantedProxyPwd = "pr0xy-Pw"
)

// credentialContext is the worker context with registry credentials given
// both ways (auth and username/password) and a proxy with a password.
func credentialContext(t *testing.T) Context {
	t.Helper()
	settings, err := ParseClusterConfiguration([]byte(`
proxy:
  httpProxy: http://proxy-user:` + plantedProxyPwd + `@proxy.corp:3128
registry:
  mirrors:
    - {host: docker.io, endpoints: ["https://m:5000"], username: ` + plantedUser + `, password: ` + plantedPassword + `}
    - {host: quay.io, endpoints: ["https://m:5000"], auth: ` + base64.StdEncoding.EncodeToString([]byte("other-user:other-Passw0rd")) + `}
`))
	if err != nil {
		t.Fatal(err)
	}
	ctx, err := NewContext(workerGroupForFuzz(), settings, []string{"10.0.0.1:6443"}, testCA)
	if err != nil {
		t.Fatal(err)
	}
	return ctx
}

func TestRenderFailuresNeverCarryCredentials(t *testing.T) {
	ctx := credentialContext(t)
	planted := []string{
		plantedUser, plantedPassword, base64.StdEncoding.EncodeToString([]byte(plantedUser + ":" + plantedPassword)),
		"other-user", "other-Passw0rd", base64.StdEncoding.EncodeToString([]byte("other-user:other-Passw0rd")),
		plantedProxyPwd,
	}
	for _, content := range []string{
		`{{ fail (toJson .registry.mirrors) }}`,
		`{{ fail (printf "%v" .registry) }}`,
		`{{ fail (toYaml .) }}`,
		`{{ range .registry.mirrors }}{{ fail (b64dec .auth) }}{{ end }}`,
		`{{ fail (index .registry.mirrors 1).auth }}`,
		`{{ fail .proxy.httpProxy }}`,
		`{{ fail (urlParse .proxy.httpProxy | toJson) }}`,
		`{{ index .registry.mirrors 0 "auth" | fail }}`,
		`{{ $m := index .registry.mirrors 0 }}{{ index $m (b64dec $m.auth) }}`,
		"echo {{ (index .registry.mirrors 0).auth | b64dec | squote }}\nif",
	} {
		_, failures := builtinTree(t).Render(&ctx, []CustomStep{{Name: "leak.sh", Weight: 200, Content: content}})
		if len(failures) == 0 {
			t.Errorf("%s: rendered", content)
			continue
		}
		for _, f := range failures {
			for _, secret := range planted {
				if strings.Contains(f.Error(), secret) {
					t.Errorf("%s: the failure carries the credential %q: %s", content, secret, f.Error())
				}
			}
		}
	}
}

func TestClusterConfigurationErrorsNeverCarryTheProxyPassword(t *testing.T) {
	_, err := ParseClusterConfiguration([]byte("proxy: {httpProxy: \"http://user:" + plantedProxyPwd + "@proxy corp:3128\"}"))
	if err == nil || strings.Contains(err.Error(), plantedProxyPwd) {
		t.Errorf("error %v: want one without the password", err)
	}
}

// The context's own refusals quote values; the credentials in them go too,
// even from a URL that does not parse.
func TestContextRefusalsNeverCarryCredentials(t *testing.T) {
	ctx := credentialContext(t)
	ctx.Registry.Mirrors[0].Endpoints = []string{"https://mirror-user:" + plantedPassword + "@mirror corp:5000"}
	_, failures := builtinTree(t).Render(&ctx, nil)
	if len(failures) != 1 || !strings.Contains(failures[0].Error(), "registry.mirrors[0].endpoints[0]") {
		t.Fatalf("failures %v, want one naming the endpoint", failures)
	}
	if strings.Contains(failures[0].Error(), plantedPassword) {
		t.Errorf("the failure carries the password: %v", failures[0])
	}
}
