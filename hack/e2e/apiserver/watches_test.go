package apiserver

import (
	"context"
	"strings"
	"testing"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/node-manager/node-manager/hack/e2e/framework"
)

// TestWatchesOutnumberingTheirSeatsAllOpen: API Priority and Fairness
// counts a watch against its priority level only until the watch is set
// up. The node's requests get a level of three seats that rejects rather
// than queues (both servers read the cluster's FlowSchemas), and the node
// opens four times as many watches one after another: each must open, and
// a GET after them must still be served. A watch that held its seat for its
// life would get 429 from the fourth on, as 4,606 of 5,000 nodes' watches
// did in the fleet benchmark.
func TestWatchesOutnumberingTheirSeatsAllOpen(t *testing.T) {
	const node, level = "node-watcher", "e2e-three-seats"
	ctx := framework.Context(t)
	f.TestNode(t, framework.NewNode(node, "worker"))
	f.TestInstance(t, framework.NewInstance(node, "worker"))
	fewSeats(t, level, "system:node:"+node)
	cfg, err := f.CP.NodeConfig(node)
	if err != nil {
		t.Fatal(err)
	}
	c := framework.BashibleClient(cfg)
	// Ready when bashible-apiserver both lets the node read (its
	// narrower knows the Instance) and puts its requests in the level.
	framework.Poll(t, "bashible-apiserver puts the node's requests in "+level, func(ctx context.Context) (bool, error) {
		if _, err := c.Bashibles().Get(ctx, "worker", metav1.GetOptions{}); err != nil {
			return false, nil
		}
		_, metrics := direct(t, replica.Port, "/metrics")
		for _, line := range strings.Split(string(metrics), "\n") {
			if strings.HasPrefix(line, "apiserver_flowcontrol_dispatched_requests_total{") && strings.Contains(line, `flow_schema="`+level+`"`) {
				return true, nil
			}
		}
		return false, nil
	})

	const seats, watches = 3, 12
	for i := range watches {
		// No retries: client-go would wait out a 429's Retry-After and
		// try again, which a seat held for good never ends.
		w, err := c.RESTClient().Get().Resource("bashibles").
			Param("fieldSelector", "metadata.name=worker").Param("watch", "true").
			MaxRetries(0).Watch(ctx)
		if err != nil {
			t.Fatalf("watch %d of %d (the level has %d seats): %v", i+1, watches, seats, err)
		}
		defer w.Stop()
		if ev := <-w.ResultChan(); ev.Type != watch.Added {
			t.Fatalf("watch %d of %d: first event %s %v, want ADDED worker", i+1, watches, ev.Type, ev.Object)
		}
	}
	if _, err := c.Bashibles().Get(ctx, "worker", metav1.GetOptions{}); err != nil {
		t.Fatalf("a GET with %d watches open: %v", watches, err)
	}
}

// fewSeats routes user's requests to a new priority level of name with
// three of kube-apiserver's and bashible-apiserver's 600 seats (a share
// of 1 beside the default levels' 245), lending none, borrowing none and
// rejecting what does not fit.
func fewSeats(t *testing.T, name, user string) {
	t.Helper()
	ctx := framework.Context(t)
	api := f.Kube.FlowcontrolV1()
	level := &flowcontrolv1.PriorityLevelConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: flowcontrolv1.PriorityLevelConfigurationSpec{Type: flowcontrolv1.PriorityLevelEnablementLimited,
			Limited: &flowcontrolv1.LimitedPriorityLevelConfiguration{NominalConcurrencyShares: ptr.To(int32(1)),
				LendablePercent: ptr.To(int32(0)), BorrowingLimitPercent: ptr.To(int32(0)),
				LimitResponse: flowcontrolv1.LimitResponse{Type: flowcontrolv1.LimitResponseTypeReject}}}}
	if _, err := api.PriorityLevelConfigurations().Create(ctx, level, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create PriorityLevelConfiguration %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = api.PriorityLevelConfigurations().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	schema := &flowcontrolv1.FlowSchema{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: flowcontrolv1.FlowSchemaSpec{PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: name},
			// Before system-nodes (500), after exempt (1).
			MatchingPrecedence:  50,
			DistinguisherMethod: &flowcontrolv1.FlowDistinguisherMethod{Type: flowcontrolv1.FlowDistinguisherMethodByUserType},
			Rules: []flowcontrolv1.PolicyRulesWithSubjects{{
				Subjects: []flowcontrolv1.Subject{{Kind: flowcontrolv1.SubjectKindUser, User: &flowcontrolv1.UserSubject{Name: user}}},
				ResourceRules: []flowcontrolv1.ResourcePolicyRule{{Verbs: []string{flowcontrolv1.VerbAll}, APIGroups: []string{flowcontrolv1.APIGroupAll},
					Resources: []string{flowcontrolv1.ResourceAll}, ClusterScope: true, Namespaces: []string{flowcontrolv1.NamespaceEvery}}},
			}}}}
	if _, err := api.FlowSchemas().Create(ctx, schema, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create FlowSchema %s: %v", name, err)
	}
	t.Cleanup(func() { _ = api.FlowSchemas().Delete(context.Background(), name, metav1.DeleteOptions{}) })
}
