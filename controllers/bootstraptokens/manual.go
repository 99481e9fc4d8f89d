package bootstraptokens

import (
	"bytes"
	_ "embed"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"text/template"
	"time"

	"sigs.k8s.io/yaml"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	infrav1alpha1 "github.com/node-manager/node-manager/apiserver/apis/infrastructure/v1alpha1"
)

// scriptTemplate is the manual-bootstrap script, an administrator's
// bootstrap.sh (not the served first-boot script, bootstrap/<group>, that
// it fetches and runs).
//
//go:embed manual-bootstrap.sh.tpl
var scriptTemplate string

var script = template.Must(template.New("bootstrap.sh").
	Option("missingkey=error").
	Funcs(template.FuncMap{"squote": shellQuote}).
	Parse(scriptTemplate))

// CloudConfigScriptPath is where the cloud-config document puts the
// manual-bootstrap script.
const CloudConfigScriptPath = "/var/lib/bashible/manual-bootstrap.sh"

// Manual is what a group's manual-bootstrap Secret is made from.
type Manual struct {
	Namespace string
	Group     string
	Token     Token
	// CA is the cluster CA bundle (PEM).
	CA string
	// Endpoints are the API server's host:port addresses.
	Endpoints []string
}

// endpointPattern is what an endpoint may look like: a host name, an IPv4
// address or a bracketed IPv6 address, and a port. Anything else cannot be
// put into a URL safely and is left out.
var endpointPattern = regexp.MustCompile(`^([A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\]):[0-9]{1,5}$`)

// ValidEndpoints keeps the endpoints that can go into the script.
func ValidEndpoints(endpoints []string) []string {
	var out []string
	for _, e := range endpoints {
		if endpointPattern.MatchString(e) {
			out = append(out, e)
		}
	}
	return out
}

// SecretName is the manual-bootstrap Secret of group.
func SecretName(group string) string { return deckhousev1.ManualBootstrapSecretPrefix + group }

// BootstrapDataSecretName is the bootstrap-data Secret of a CloudEphemeral
// group, which its Machines name as their spec.bootstrap.dataSecretName.
func BootstrapDataSecretName(group string) string {
	return deckhousev1.BootstrapDataSecretPrefix + group
}

// FreshScriptCommand is the command that prints group's current script.
func FreshScriptCommand(namespace, group string) string {
	return fmt.Sprintf(`kubectl -n %s get secret %s -o json | jq -r '.data["%s"]' | base64 -d`, namespace, SecretName(group), deckhousev1.ManualBootstrapScriptKey)
}

// Script renders the manual-bootstrap script (the Secret's bootstrap.sh):
// it states the token's expiry, refuses to run once it has passed, writes
// the CA and the token, then fetches and runs the served first-boot script,
// bootstrap/<group>, from the first endpoint that serves it.
func (m Manual) Script() (string, error) {
	if len(m.Endpoints) == 0 {
		return "", fmt.Errorf("no API server endpoints for group %s", m.Group)
	}
	if err := checkCA(m.CA); err != nil {
		return "", err
	}
	var buf bytes.Buffer
	err := script.Execute(&buf, map[string]any{
		"Group":        m.Group,
		"Namespace":    m.Namespace,
		"SecretName":   SecretName(m.Group),
		"ExpiresAt":    m.Token.Expires.UTC().Format(time.RFC3339),
		"ExpiresEpoch": strconv.FormatInt(m.Token.Expires.Unix(), 10),
		"FreshCommand": FreshScriptCommand(m.Namespace, m.Group),
		"Endpoints":    strings.Join(m.Endpoints, " "),
		"CA":           strings.TrimRight(m.CA, "\n"),
		"Token":        m.Token.String(),
	})
	if err != nil {
		return "", fmt.Errorf("render bootstrap.sh of group %s: %w", m.Group, err)
	}
	return buf.String(), nil
}

type cloudConfig struct {
	WriteFiles []cloudFile `json:"write_files"`
	RunCmd     [][]string  `json:"runcmd"`
}

type cloudFile struct {
	Path        string `json:"path"`
	Permissions string `json:"permissions"`
	Encoding    string `json:"encoding"`
	Content     string `json:"content"`
}

// CloudConfig wraps a rendered manual-bootstrap script into a #cloud-config document
// that writes it and runs it once at first boot.
func CloudConfig(script string) (string, error) {
	doc, err := yaml.Marshal(cloudConfig{
		WriteFiles: []cloudFile{{
			Path:        CloudConfigScriptPath,
			Permissions: "0700",
			Encoding:    "b64",
			Content:     base64.StdEncoding.EncodeToString([]byte(script)),
		}},
		RunCmd: [][]string{{"bash", CloudConfigScriptPath}},
	})
	if err != nil {
		return "", err
	}
	return "#cloud-config\n" + string(doc), nil
}

// Data renders the Secret's keys: bootstrap.sh, cloud-config and
// apiserverEndpoints (a YAML list).
func (m Manual) Data() (map[string][]byte, error) {
	sh, cc, err := m.scripts()
	if err != nil {
		return nil, err
	}
	endpoints, err := yaml.Marshal(m.Endpoints)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{
		deckhousev1.ManualBootstrapScriptKey:      []byte(sh),
		deckhousev1.ManualBootstrapCloudConfigKey: []byte(cc),
		deckhousev1.ManualBootstrapEndpointsKey:   endpoints,
	}, nil
}

// BootstrapData renders a bootstrap-data Secret's keys, as Cluster API's
// infrastructure providers read them: the manual-bootstrap script as
// cloud-init user data, and its format.
func (m Manual) BootstrapData() (map[string][]byte, error) {
	_, cc, err := m.scripts()
	if err != nil {
		return nil, err
	}
	return map[string][]byte{
		infrav1alpha1.ClusterSecretValueKey:  []byte(cc),
		infrav1alpha1.BootstrapDataFormatKey: []byte(deckhousev1.ManualBootstrapCloudConfigKey),
	}, nil
}

// scripts renders the script and the cloud-config document that runs it.
func (m Manual) scripts() (script, cloudConfig string, err error) {
	if script, err = m.Script(); err != nil {
		return "", "", err
	}
	if cloudConfig, err = CloudConfig(script); err != nil {
		return "", "", err
	}
	return script, cloudConfig, nil
}

// checkCA accepts a PEM bundle of at least one certificate that cannot end
// the script's here-document early.
func checkCA(ca string) error {
	block, _ := pem.Decode([]byte(ca))
	if block == nil || block.Type != "CERTIFICATE" {
		return errors.New("the cluster CA is not a PEM certificate")
	}
	for line := range strings.SplitSeq(ca, "\n") {
		if strings.TrimSpace(line) == "CLUSTER_CA" {
			return errors.New("the cluster CA holds a line CLUSTER_CA")
		}
	}
	return nil
}

// shellQuote quotes s for bash in single quotes; a quote inside s closes
// them, is written escaped, and reopens them.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
