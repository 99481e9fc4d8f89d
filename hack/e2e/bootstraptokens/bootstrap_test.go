package bootstraptokens

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	deckhousev1 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1"
	"github.com/node-manager/node-manager/controllers/bootstraptokens"
	"github.com/node-manager/node-manager/hack/controlplane"
	"github.com/node-manager/node-manager/hack/e2e/framework"
	"github.com/node-manager/node-manager/hack/shelltest"
)

// groupTokens are the group's token Secrets as stored, by name.
func groupTokens(ctx context.Context, group string) (map[string]controlplane.BootstrapToken, error) {
	list, err := f.Kube.CoreV1().Secrets(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: deckhousev1.TokenNodeGroupLabel + "=" + group})
	if err != nil {
		return nil, err
	}
	out := map[string]controlplane.BootstrapToken{}
	for _, s := range list.Items {
		exp, err := time.Parse(time.RFC3339, string(s.Data["expiration"]))
		if err != nil {
			return nil, err
		}
		out[s.Name] = controlplane.BootstrapToken{ID: string(s.Data["token-id"]), Secret: string(s.Data["token-secret"]), Expires: exp}
	}
	return out, nil
}

// waitTokens polls until the group's tokens satisfy ok.
func waitTokens(t *testing.T, group string, ok func(map[string]controlplane.BootstrapToken) bool) map[string]controlplane.BootstrapToken {
	t.Helper()
	var got map[string]controlplane.BootstrapToken
	framework.Poll(t, "bootstrap tokens of "+group, func(ctx context.Context) (bool, error) {
		var err error
		got, err = groupTokens(ctx, group)
		return err == nil && ok(got), err
	})
	return got
}

// waitManualSecret polls until the group's manual-bootstrap Secret holds tok.
func waitManualSecret(t *testing.T, group string, tok controlplane.BootstrapToken) *corev1.Secret {
	t.Helper()
	var got *corev1.Secret
	framework.Poll(t, "manual-bootstrap Secret of "+group+" with token "+tok.ID, func(ctx context.Context) (bool, error) {
		s, err := f.Kube.CoreV1().Secrets(deckhousev1.Namespace).Get(ctx, bootstraptokens.SecretName(group), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		got = s
		return s.Annotations[deckhousev1.TokenIDAnnotation] == tok.ID &&
			s.Annotations[deckhousev1.TokenExpiresAtAnnotation] == tok.Expires.Format(time.RFC3339) &&
			strings.Contains(string(s.Data["bootstrap.sh"]), tok.String()), nil
	})
	return got
}

// only is the single token of a set.
func only(t *testing.T, toks map[string]controlplane.BootstrapToken) controlplane.BootstrapToken {
	t.Helper()
	if len(toks) != 1 {
		t.Fatalf("want one token, got %d", len(toks))
	}
	for _, tok := range toks {
		return tok
	}
	panic("unreachable")
}

// newest is the token that expires last.
func newest(toks map[string]controlplane.BootstrapToken) controlplane.BootstrapToken {
	var best controlplane.BootstrapToken
	for _, tok := range toks {
		if tok.Expires.After(best.Expires) {
			best = tok
		}
	}
	return best
}

// readsOnlyItsGroup checks the token through the aggregator: it reads its
// group's bootstrap script and not another group's.
func readsOnlyItsGroup(t *testing.T, tok controlplane.BootstrapToken, group, other string) {
	t.Helper()
	client := framework.BashibleClient(f.CP.BootstrapTokenConfig(tok)).Bootstraps()
	ctx := framework.Context(t)
	b, err := client.Get(ctx, group, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("token %s: get bootstrap/%s: %v", tok.ID, group, err)
	}
	if !strings.HasPrefix(b.Bootstrap, "#!/usr/bin/env bash") {
		t.Errorf("bootstrap/%s is not a script: %.80q", group, b.Bootstrap)
	}
	if _, err := client.Get(ctx, other, metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("token %s of %s: get bootstrap/%s: want Forbidden, got %v", tok.ID, group, other, err)
	}
}

// runScript runs bootstrap.sh as an administrator would on a new machine,
// with the machine's root redirected to root.
func runScript(t *testing.T, script, root string, endpoints ...string) (string, int) {
	t.Helper()
	return shelltest.Run(t, "bootstrap.sh", script, "BASHIBLE_ROOT="+root, "BASHIBLE_API_ENDPOINTS="+strings.Join(endpoints, " "))
}

func TestBootstrapTokensAndManualBootstrap(t *testing.T) {
	local := strings.TrimPrefix(f.CP.APIServerURL, "https://")
	var first controlplane.BootstrapToken
	var manual *corev1.Secret

	if !t.Run("a token per group that reads only its group", func(t *testing.T) {
		first = only(t, waitTokens(t, staticGroup, func(m map[string]controlplane.BootstrapToken) bool { return len(m) > 0 }))
		if d := time.Until(first.Expires); d < bootstraptokens.TokenTTL-time.Minute || d > bootstraptokens.TokenTTL {
			t.Errorf("token expires in %s, want about %s", d, bootstraptokens.TokenTTL)
		}
		manual = waitManualSecret(t, staticGroup, first)
		readsOnlyItsGroup(t, first, staticGroup, ephemeralGroup)

		cloud := only(t, waitTokens(t, ephemeralGroup, func(m map[string]controlplane.BootstrapToken) bool { return len(m) > 0 }))
		readsOnlyItsGroup(t, cloud, ephemeralGroup, staticGroup)
		if _, err := f.Kube.CoreV1().Secrets(deckhousev1.Namespace).Get(framework.Context(t), bootstraptokens.SecretName(ephemeralGroup), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("CloudEphemeral group %s: want no manual-bootstrap Secret, got %v", ephemeralGroup, err)
		}
		if got := string(manual.Data["apiserverEndpoints"]); got != "- "+documentedEndpoint+"\n" {
			t.Errorf("apiserverEndpoints = %q", got)
		}
		if !strings.HasPrefix(string(manual.Data["cloud-config"]), "#cloud-config\n") {
			t.Errorf("cloud-config = %.60q", manual.Data["cloud-config"])
		}

		// The issue is recorded on the NodeGroup, without the secret.
		framework.Poll(t, "BootstrapTokenIssued event of "+staticGroup, func(ctx context.Context) (bool, error) {
			evs, err := f.Kube.EventsV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err
			}
			for _, e := range evs.Items {
				if e.Reason == "BootstrapTokenIssued" && e.Regarding.Kind == "NodeGroup" && e.Regarding.Name == staticGroup {
					if strings.Contains(e.Note, first.Secret) {
						t.Errorf("event note shows the token secret: %q", e.Note)
					}
					return strings.Contains(e.Note, first.ID), nil
				}
			}
			return false, nil
		})
	}) {
		return
	}

	t.Run("the script joins a machine", func(t *testing.T) {
		root := t.TempDir()
		// The first endpoint refuses connections; the script tries the next.
		out, code := runScript(t, string(manual.Data["bootstrap.sh"]), root, "127.0.0.1:1", local)
		t.Logf("bootstrap.sh exited %d:\n%s", code, out)
		for _, want := range []string{
			"valid until " + first.Expires.Format(time.RFC3339),
			"could not reach 127.0.0.1:1",
			"running the bootstrap script of group " + staticGroup + " served by " + local,
		} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q", want)
			}
		}
		dir := filepath.Join(root, "var/lib/bashible")
		if got := framework.ReadFile(t, filepath.Join(dir, "bootstrap-token")); got != first.String()+"\n" {
			t.Errorf("bootstrap-token = %q", got)
		}
		if st, err := os.Stat(filepath.Join(dir, "bootstrap-token")); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("bootstrap-token: mode %v, %v; want 0600", st.Mode().Perm(), err)
		}
		if got := strings.TrimSpace(framework.ReadFile(t, filepath.Join(dir, "ca.crt"))); got != strings.TrimSpace(string(f.CP.CACertPEM())) {
			t.Error("ca.crt is not the cluster CA")
		}
		// It fetched and ran the served bootstrap script, which fetched
		// bashible.sh with the token and started it: what a joining
		// machine does. (bashible then stops: the temp root has no
		// /etc/os-release to pick a bundle by.)
		ctx := framework.Context(t)
		served, err := f.NM.BashibleV1alpha1().Bootstraps().Get(ctx, staticGroup, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := framework.ReadFile(t, filepath.Join(dir, "bootstrap.sh")); got != served.Bootstrap {
			t.Errorf("var/lib/bashible/bootstrap.sh is not the served bootstrap/%s", staticGroup)
		}
		agent, err := f.NM.BashibleV1alpha1().Bashibles().Get(ctx, staticGroup, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := framework.ReadFile(t, filepath.Join(dir, "bashible.sh")); got != agent.Data["bashible.sh"] {
			t.Error("var/lib/bashible/bashible.sh is not the served bashibles/" + staticGroup)
		}
		if _, err := os.Stat(filepath.Join(dir, "first_run")); err != nil {
			t.Errorf("first_run: %v", err)
		}
		if _, err := os.Stat(filepath.Join(root, "var/lock/bashible")); err != nil {
			t.Errorf("bashible.sh did not start (no lock file): %v", err)
		}
	})

	if !t.Run("rotation: the Secret follows, the old token goes once expired", func(t *testing.T) {
		clock.Step(bootstraptokens.TokenTTL - bootstraptokens.MinValidity) // 3 h left: rotate
		toks := waitTokens(t, staticGroup, func(m map[string]controlplane.BootstrapToken) bool { return len(m) == 2 })
		second := newest(toks)
		if second.ID == first.ID {
			t.Fatal("the newest token is still the first")
		}
		if _, ok := toks["bootstrap-token-"+first.ID]; !ok {
			t.Error("the first token was deleted before it expired")
		}
		manual = waitManualSecret(t, staticGroup, second)
		readsOnlyItsGroup(t, second, staticGroup, ephemeralGroup)

		// Past the first token's expiry; the second has 1 h left and is
		// replaced too.
		clock.Step(bootstraptokens.MinValidity)
		toks = waitTokens(t, staticGroup, func(m map[string]controlplane.BootstrapToken) bool {
			_, firstLeft := m["bootstrap-token-"+first.ID]
			return !firstLeft && len(m) == 2
		})
		third := newest(toks)
		if third.ID == second.ID {
			t.Fatal("the second token was not replaced with 1 h left")
		}
		manual = waitManualSecret(t, staticGroup, third)
		readsOnlyItsGroup(t, third, staticGroup, ephemeralGroup)
	}) {
		return
	}

	t.Run("an expired script refuses with a clear message", func(t *testing.T) {
		// The script as the controller wrote it from a clock in the past:
		// the same CA, endpoints and a token the API still accepts, but
		// an expiry that has passed.
		var endpoints []string
		if err := yaml.UnmarshalStrict(manual.Data["apiserverEndpoints"], &endpoints); err != nil {
			t.Fatal(err)
		}
		ca, err := f.Kube.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(framework.Context(t), deckhousev1.RootCAConfigMap, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cur := newest(waitTokens(t, staticGroup, func(m map[string]controlplane.BootstrapToken) bool { return len(m) > 0 }))
		expired := time.Now().Add(-time.Minute).UTC().Truncate(time.Second)
		script, err := bootstraptokens.Manual{
			Namespace: deckhousev1.Namespace, Group: staticGroup, CA: ca.Data["ca.crt"], Endpoints: endpoints,
			Token: bootstraptokens.Token{Name: "bootstrap-token-" + cur.ID, ID: cur.ID, Secret: cur.Secret, Expires: expired},
		}.Script()
		if err != nil {
			t.Fatal(err)
		}
		root := t.TempDir()
		out, code := runScript(t, script, root, local)
		if code == 0 {
			t.Fatalf("an expired script ran:\n%s", out)
		}
		for _, want := range []string{
			"the bootstrap token in this script expired at " + expired.Format(time.RFC3339),
			"kubectl -n d8-cloud-instance-manager get secret manual-bootstrap-for-worker -o json | jq -r '.data[\"bootstrap.sh\"]' | base64 -d",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
		if entries, _ := os.ReadDir(root); len(entries) != 0 {
			t.Errorf("the expired script changed the machine: %v", entries)
		}
	})

	t.Run("a deleted group's tokens and Secret go", func(t *testing.T) {
		ctx := framework.Context(t)
		if err := f.NM.DeckhouseV1().NodeGroups().Delete(ctx, staticGroup, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitTokens(t, staticGroup, func(m map[string]controlplane.BootstrapToken) bool { return len(m) == 0 })
		framework.Poll(t, "manual-bootstrap Secret of the deleted group to go", func(ctx context.Context) (bool, error) {
			_, err := f.Kube.CoreV1().Secrets(deckhousev1.Namespace).Get(ctx, bootstraptokens.SecretName(staticGroup), metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		// The clock steps rotated the other group's token too; it keeps them.
		if toks, err := groupTokens(ctx, ephemeralGroup); err != nil || len(toks) == 0 {
			t.Errorf("the other group lost its tokens (%v)", err)
		}
	})
}
