package staticmachines

import (
	"testing"
	"time"

	deckhousev1alpha2 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha2"
)

const (
	pending       = deckhousev1alpha2.StaticInstancePending
	bootstrapping = deckhousev1alpha2.StaticInstanceBootstrapping
	running       = deckhousev1alpha2.StaticInstanceRunning
	cleaning      = deckhousev1alpha2.StaticInstanceCleaning
	errored       = deckhousev1alpha2.StaticInstanceError
)

// at is a situation at t0 in phase, entered ago, with the default timeouts.
func at(phase deckhousev1alpha2.StaticInstancePhase, ago time.Duration) situation {
	return situation{now: t0, phase: phase, since: t0.Add(-ago), matches: true,
		bootstrapTimeout: 20 * time.Minute, cleanupTimeout: 10 * time.Minute}
}

func TestDecide(t *testing.T) {
	with := func(s situation, f func(*situation)) situation { f(&s); return s }
	for _, c := range []struct {
		name string
		s    situation
		want step
	}{
		{"a just-bound instance starts bootstrapping", at(pending, 0), step{phase: bootstrapping}},
		{"bootstrapping: run the script", at(bootstrapping, time.Minute), step{run: taskBootstrap}},
		{"bootstrapping: wait while it runs", with(at(bootstrapping, time.Minute), func(s *situation) { s.task = outcomeRunning }),
			step{requeue: pollWhileRunning}},
		{"bootstrapping: the SSH session dropped, run it again a little later (resume)",
			with(at(bootstrapping, time.Minute), func(s *situation) {
				s.task, s.taskFinished, s.taskMessage = outcomeFailed, t0.Add(-5*time.Second), "ssh: session: EOF"
			}), step{requeue: 10 * time.Second, condition: &conditionChange{Type: condBootstrapped, Reason: "AttemptFailed", Message: "ssh: session: EOF; trying again"}}},
		{"bootstrapping: after the retry delay, run it again",
			with(at(bootstrapping, time.Minute), func(s *situation) { s.task, s.taskFinished = outcomeFailed, t0.Add(-retryAfterFailure) }),
			step{run: taskBootstrap}},
		{"bootstrapping: login refused is an Error, the machine picks another host",
			with(at(bootstrapping, time.Minute), func(s *situation) { s.task, s.taskMessage = outcomeRefused, "ssh: unable to authenticate" }),
			step{phase: errored, release: true,
				condition: &conditionChange{Type: condCredentials, Reason: "LoginRefused", Message: "ssh: unable to authenticate"},
				event:     &eventNote{Warning: true, Reason: "StaticInstanceCredentialsUnavailable", Note: "ssh: unable to authenticate"}}},
		{"bootstrapping: the script succeeded, wait for the Node",
			with(at(bootstrapping, time.Minute), func(s *situation) { s.task, s.taskFinished = outcomeSucceeded, t0.Add(-time.Second) }),
			step{requeue: waitForNode, condition: &conditionChange{Type: condBootstrapped, Reason: "WaitingForNode", Message: "the bootstrap script succeeded; waiting for the Node to join"}}},
		{"bootstrapping: the Node joined, Running",
			with(at(bootstrapping, time.Minute), func(s *situation) { s.nodeReady = true }),
			step{phase: running, provisioned: true,
				condition: &conditionChange{Type: condBootstrapped, True: true, Reason: "NodeJoined", Message: "the host's Node joined with the machine's providerID and bashible configured it"},
				event:     &eventNote{Reason: "NodeBootstrappingSucceeded", Note: "the host's Node joined"}}},
		{"bootstrapping: timeout cleans and releases", with(at(bootstrapping, 20*time.Minute), func(s *situation) { s.task = outcomeRunning }),
			step{phase: cleaning, run: taskCleanup,
				condition: &conditionChange{Type: condBootstrapped, Reason: "BootstrapTimeoutReached", Message: "no Node joined within 20m0s of the bootstrap's start; the host is cleaned and released"},
				event:     &eventNote{Warning: true, Reason: "StaticInstanceBootstrapTimeoutReached", Note: "bootstrap did not finish within 20m0s; cleaning and releasing the host"}}},
		{"adoption: write the files", with(at(bootstrapping, 0), func(s *situation) { s.adopt = true }), step{run: taskAdopt}},
		{"adoption: done, Running, annotation dropped", with(at(bootstrapping, 0), func(s *situation) { s.adopt, s.task = true, outcomeSucceeded }),
			step{phase: running, provisioned: true, dropAdoption: true,
				condition: &conditionChange{Type: condBootstrapped, True: true, Reason: "Adopted", Message: "the running node was handed over without a bootstrap"},
				event:     &eventNote{Reason: "AdoptionSucceeded", Note: "the host's provider id and machine name were written; the node is now managed by CAPS"}}},
		{"adoption of a control-plane node is refused", with(at(bootstrapping, 0), func(s *situation) { s.adopt, s.controlPlane = true, true }),
			step{phase: pending, release: true, requeue: refusedRecheck,
				condition: &conditionChange{Type: condBootstrapped, Reason: "ControlPlaneAdoptionRefused", Message: "the host is a control-plane node: CAPS adopts it only with the annotation static.node.deckhouse.io/allow-control-plane=true"},
				event:     &eventNote{Warning: true, Reason: "ControlPlaneAdoptionRefused", Note: "refused to adopt a control-plane node"}}},
		{"adoption of a control-plane node when told to", with(at(bootstrapping, 0), func(s *situation) { s.adopt, s.controlPlane, s.allowControlPlane = true, true, true }),
			step{run: taskAdopt}},
		{"running and matching: keep the machine provisioned", with(at(running, time.Hour), func(s *situation) { s.nodeReady = true }), step{provisioned: true}},
		{"running, labels stopped matching: release through the Machine", with(at(running, time.Hour), func(s *situation) { s.matches = false }),
			step{deleteMachine: true, event: &eventNote{Reason: "StaticInstanceNodeGroupLeaved",
				Note: "the instance's labels no longer match its group's staticInstances.labelSelector: its machine is deleted, so the host is drained, cleaned and released"}}},
		{"a bound Error instance is released", at(errored, 0), step{release: true}},
		{"deleting a running machine: clean", with(at(running, time.Hour), func(s *situation) { s.deleting = true }), step{phase: cleaning, run: taskCleanup}},
		{"deleting a control-plane machine is refused", with(at(running, time.Hour), func(s *situation) { s.deleting, s.controlPlane = true, true }),
			step{requeue: refusedRecheck,
				condition: &conditionChange{Type: condCleaned, Reason: "ControlPlaneCleanupRefused", Message: "the host is a control-plane node: CAPS cleans it only with the annotation static.node.deckhouse.io/allow-control-plane=true; its machine waits"},
				event:     &eventNote{Warning: true, Reason: "ControlPlaneCleanupRefused", Note: "refused to clean a control-plane node"}}},
		{"deleting a never-bootstrapped machine: nothing to clean", with(at(pending, 0), func(s *situation) { s.deleting = true }),
			step{release: true, removeFinalizer: true}},
		{"cleaning: done, Pending again, machine goes", with(at(cleaning, time.Minute), func(s *situation) { s.deleting, s.task = true, outcomeSucceeded }),
			step{phase: pending, release: true, removeFinalizer: true,
				condition: &conditionChange{Type: condCleaned, True: true, Reason: "CleanupScriptSucceeded", Message: "the host was cleaned and is free again"},
				event:     &eventNote{Reason: "CleanupScriptSucceeded", Note: "the host was cleaned and is Pending again"}}},
		{"cleaning after a bootstrap timeout: done, Pending, the machine stays", with(at(cleaning, time.Minute), func(s *situation) { s.task = outcomeSucceeded }),
			step{phase: pending, release: true,
				condition: &conditionChange{Type: condCleaned, True: true, Reason: "CleanupScriptSucceeded", Message: "the host was cleaned and is free again"},
				event:     &eventNote{Reason: "CleanupScriptSucceeded", Note: "the host was cleaned and is Pending again"}}},
		{"cleaning: timeout releases anyway", with(at(cleaning, 10*time.Minute), func(s *situation) { s.deleting, s.task = true, outcomeRunning }),
			step{phase: pending, release: true, removeFinalizer: true,
				condition: &conditionChange{Type: condCleaned, Reason: "CleanupTimeoutReached", Message: "cleanup did not finish within 10m0s; the host is Pending again but may hold leftovers: run /var/lib/bashible/cleanup_static_node.sh on it"},
				event:     &eventNote{Warning: true, Reason: "StaticInstanceCleanupTimeoutReached", Note: "cleanup did not finish within 10m0s; the host was released anyway"}}},
	} {
		got := decide(c.s)
		if !equalStep(got, c.want) {
			t.Errorf("%s:\n got %s\nwant %s", c.name, describe(got), describe(c.want))
		}
		// kube-apiserver refuses an events.k8s.io/v1 Event without an action.
		if got.event != nil && eventAction(c.s) == "" {
			t.Errorf("%s: the Event %s has no action", c.name, got.event.Reason)
		}
	}
}

func equalStep(a, b step) bool {
	ca, cb, ea, eb := a.condition, b.condition, a.event, b.event
	a.condition, b.condition, a.event, b.event = nil, nil, nil, nil
	if a != b || (ca == nil) != (cb == nil) || (ea == nil) != (eb == nil) {
		return false
	}
	return (ca == nil || *ca == *cb) && (ea == nil || *ea == *eb)
}
