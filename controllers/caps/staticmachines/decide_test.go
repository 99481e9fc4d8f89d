package staticmachines

import (
	"fmt"
	"testing"
	"time"

	deckhousev1alpha2 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha2"
	infrav1alpha1 "github.com/node-manager/node-manager/apiserver/apis/infrastructure/v1alpha1"
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
	for _, c := range []struct {
		name string
		s    situation
		want step
	}{
		{"a just-bound instance starts bootstrapping", at(pending, 0), step{phase: bootstrapping,
			condition: &conditionChange{Type: condBootstrapped, Reason: "Bootstrapping", Message: "the host is being bootstrapped"}}},
		{"a just-bound adoption starts (an earlier Adopted no longer holds)", with(at(pending, 0), func(s *situation) { s.adopt = true }),
			step{phase: bootstrapping, condition: &conditionChange{Type: condBootstrapped, Reason: "Adopting", Message: "the running node is being handed over to CAPS"}}},
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
		{"deleting a running machine: clean", with(at(running, time.Hour), func(s *situation) { s.deleting = true }), step{phase: cleaning, run: taskCleanup,
			machineCondition: &conditionChange{Type: condMachineReady, Reason: "Cleaning", Message: "the machine is deleted: its host is being cleaned"}}},
		{"deleting a control-plane machine is refused, reported on the instance and the machine",
			with(at(running, time.Hour), func(s *situation) { s.deleting, s.controlPlane = true, true }),
			step{requeue: refusalBackoffMin, refused: true, condition: cpRefused, machineCondition: refusedMachine(cpRefused),
				event: &eventNote{Warning: true, Reason: "ControlPlaneCleanupRefused", Note: cpRefused.Message}}},
		{"a refused cleanup looked at again: backoff doubles, no second Event",
			with(at(running, time.Hour), func(s *situation) { s.deleting, s.controlPlane, s.refusals = true, true, 3 }),
			step{requeue: 8 * refusalBackoffMin, refused: true, condition: cpRefused, machineCondition: refusedMachine(cpRefused)}},
		{"a refused cleanup's backoff stops at its maximum",
			with(at(bootstrapping, time.Hour), func(s *situation) { s.deleting, s.controlPlane, s.refusals = true, true, 40 }),
			step{requeue: refusalBackoffMax, refused: true, condition: cpRefused, machineCondition: refusedMachine(cpRefused)}},
		{"deleting a control-plane machine allowed by the annotation: clean (the refusal no longer holds)",
			with(at(running, time.Hour), func(s *situation) { s.deleting, s.controlPlane, s.allowControlPlane, s.refusals = true, true, true, 5 }),
			step{phase: cleaning, run: taskCleanup, machineCondition: &conditionChange{Type: condMachineReady, Reason: "Cleaning", Message: "the machine is deleted: its host is being cleaned"}}},
		{"deleting a machine whose host is another Node: refused", with(at(running, time.Hour), foreign(func(s *situation) { s.deleting = true })),
			step{requeue: refusalBackoffMin, refused: true, condition: foreignRefused, machineCondition: refusedMachine(foreignRefused),
				event: &eventNote{Warning: true, Reason: "ForeignNodeCleanupRefused", Note: foreignRefused.Message}}},
		{"a foreign Node appears while bootstrapping: released untouched", with(at(bootstrapping, time.Minute), foreign(nil)),
			step{phase: pending, release: true, condition: foreignAbandoned, event: &eventNote{Warning: true, Reason: "AddressInUse", Note: foreignAbandoned.Message}}},
		{"a foreign Node at the bootstrap timeout: released, never cleaned", with(at(bootstrapping, 20*time.Minute), foreign(func(s *situation) { s.task = outcomeRunning })),
			step{phase: pending, release: true, condition: foreignAbandoned, event: &eventNote{Warning: true, Reason: "AddressInUse", Note: foreignAbandoned.Message}}},
		{"the machine's Node joined though another Node has the address too: Running",
			with(at(bootstrapping, time.Minute), foreign(func(s *situation) { s.nodeReady = true })),
			step{phase: running, provisioned: true,
				condition: &conditionChange{Type: condBootstrapped, True: true, Reason: "NodeJoined", Message: "the host's Node joined with the machine's providerID and bashible configured it"},
				event:     &eventNote{Reason: "NodeBootstrappingSucceeded", Note: "the host's Node joined"}}},
		{"bootstrap timeout of a control-plane node: released in Error, never cleaned",
			with(at(bootstrapping, 20*time.Minute), func(s *situation) { s.controlPlane = true }),
			step{phase: errored, release: true, condition: cpTimeout, event: &eventNote{Warning: true, Reason: "BootstrapTimeoutReached", Note: cpTimeout.Message}}},
		{"bootstrap timeout of a control-plane node allowed by the annotation: cleaned",
			with(at(bootstrapping, 20*time.Minute), func(s *situation) { s.controlPlane, s.allowControlPlane = true, true }),
			step{phase: cleaning, run: taskCleanup,
				condition: &conditionChange{Type: condBootstrapped, Reason: "BootstrapTimeoutReached", Message: "no Node joined within 20m0s of the bootstrap's start; the host is cleaned and released"},
				event:     &eventNote{Warning: true, Reason: "StaticInstanceBootstrapTimeoutReached", Note: "bootstrap did not finish within 20m0s; cleaning and releasing the host"}}},
		{"adoption with a Node of another machine at the address: released untouched", with(at(bootstrapping, 0), foreign(func(s *situation) { s.adopt = true })),
			step{phase: pending, release: true, condition: foreignAbandoned, event: &eventNote{Warning: true, Reason: "AddressInUse", Note: foreignAbandoned.Message}}},
		{"cleaning a deleted machine's host, now another Node's: refused", with(at(cleaning, time.Minute), foreign(func(s *situation) { s.deleting = true })),
			step{requeue: refusalBackoffMin, refused: true, condition: foreignRefused, machineCondition: refusedMachine(foreignRefused),
				event: &eventNote{Warning: true, Reason: "ForeignNodeCleanupRefused", Note: foreignRefused.Message}}},
		{"cleaning refused past the cleanup timeout: still refused, never 'clean it by hand'",
			with(at(cleaning, time.Hour), func(s *situation) { s.deleting, s.controlPlane, s.refusals = true, true, 1 }),
			step{requeue: 2 * refusalBackoffMin, refused: true, condition: cpRefused, machineCondition: refusedMachine(cpRefused)}},
		{"cleaning that was already running when the refusal came: wait for it", with(at(cleaning, time.Minute), foreign(func(s *situation) { s.deleting, s.task = true, outcomeRunning })),
			step{requeue: pollWhileRunning}},
		{"cleaning after a bootstrap timeout, now a control-plane node: released in Error, not cleaned",
			with(at(cleaning, time.Minute), func(s *situation) { s.controlPlane = true }),
			step{phase: errored, release: true, condition: cpNotCleaned, event: &eventNote{Warning: true, Reason: "ControlPlaneCleanupRefused", Note: cpNotCleaned.Message}}},
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

// Conditions the table expects.
var (
	cpRefused = &conditionChange{Type: condCleaned, Reason: "ControlPlaneCleanupRefused",
		Message: "the host is a control-plane node: CAPS cleans it only with the annotation static.node.deckhouse.io/allow-control-plane=true; its machine waits until then"}
	foreignRefused = &conditionChange{Type: condCleaned, Reason: "ForeignNodeCleanupRefused",
		Message: "the host's address 10.0.0.5 is the address of Node master-0, which is not this machine's Node: CAPS does not clean it. " +
			"If Node master-0 no longer exists, delete it (kubectl delete node master-0) and the cleanup goes on; its machine waits until then"}
	foreignAbandoned = &conditionChange{Type: condBootstrapped, Reason: "AddressInUse",
		Message: "the host's address 10.0.0.5 is the address of Node master-0, which is not this machine's Node: CAPS released the host without bootstrapping, adopting or cleaning it"}
	cpTimeout = &conditionChange{Type: condBootstrapped, Reason: "BootstrapTimeoutReached",
		Message: "no Node joined within 20m0s of the bootstrap's start; the host is released but not cleaned: the host is a control-plane node: CAPS cleans it only with the annotation static.node.deckhouse.io/allow-control-plane=true"}
	cpNotCleaned = &conditionChange{Type: condCleaned, Reason: "ControlPlaneCleanupRefused",
		Message: "the host is released but not cleaned: the host is a control-plane node: CAPS cleans it only with the annotation static.node.deckhouse.io/allow-control-plane=true"}
)

// refusedMachine is the StaticMachine's condition while the cleanup is refused for why.
func refusedMachine(why *conditionChange) *conditionChange {
	return &conditionChange{Type: condMachineReady, Reason: infrav1alpha1.CleanupRefusedReason, Message: why.Message}
}

// foreign puts Node master-0, not the machine's, at the host's address 10.0.0.5.
func foreign(f func(*situation)) func(*situation) {
	return func(s *situation) {
		s.address, s.foreignNode = "10.0.0.5", "master-0"
		if f != nil {
			f(s)
		}
	}
}

// TestDecideNeverTouchesAnotherNode runs decide over every combination of
// what it looks at and checks the guards on every path: no SSH operation
// at all on a host whose address is another Node's; no cleanup of a
// control-plane node without allow-control-plane; a machine being deleted
// keeps its finalizer while its host's cleanup is refused; every refusal
// is reported and looked at again.
func TestDecideNeverTouchesAnotherNode(t *testing.T) {
	phases := []deckhousev1alpha2.StaticInstancePhase{"", pending, bootstrapping, running, cleaning, errored}
	outcomes := []outcome{outcomeNone, outcomeRunning, outcomeSucceeded, outcomeFailed, outcomeRefused}
	n := 0
	for _, phase := range phases {
		for _, ago := range []time.Duration{0, 15 * time.Minute, time.Hour} {
			for _, o := range outcomes {
				for _, refusals := range []int{0, 2} {
					for flags := range 1 << 8 {
						bit := func(i int) bool { return flags&(1<<i) != 0 }
						s := at(phase, ago)
						s.task, s.taskFinished, s.refusals = o, t0.Add(-time.Minute), refusals
						s.deleting, s.adopt, s.nodeReady, s.controlPlane, s.allowControlPlane, s.matches = bit(0), bit(1), bit(2), bit(3), bit(4), bit(5)
						if bit(6) {
							s = with(s, foreign(nil))
						}
						s.hostKeyNotPinned = bit(7)
						checkGuards(t, s, decide(s))
						n++
					}
				}
			}
		}
	}
	t.Logf("%d situations", n)
}

func with(s situation, f func(*situation)) situation { f(&s); return s }

func checkGuards(t *testing.T, s situation, got step) {
	t.Helper()
	name := fmt.Sprintf("%+v", s)
	mayClean := s.foreignNode == "" && (!s.controlPlane || s.allowControlPlane)
	if got.run == taskCleanup && !mayClean {
		t.Errorf("%s: cleans a host it may not: %s", name, describe(got))
	}
	if got.phase == cleaning && s.phase != cleaning && !mayClean {
		t.Errorf("%s: moves to Cleaning a host it may not clean: %s", name, describe(got))
	}
	if (got.run == taskBootstrap || got.run == taskAdopt) && s.foreignNode != "" {
		t.Errorf("%s: runs %s on a host that is another node: %s", name, got.run, describe(got))
	}
	if s.hostKeyNotPinned && got.run != "" {
		t.Errorf("%s: runs %s on a host whose key is neither pinned nor trusted on first use: %s", name, got.run, describe(got))
	}
	if got.refused {
		if got.removeFinalizer || got.release || got.run != "" {
			t.Errorf("%s: a refused cleanup lets the machine go or runs something: %s", name, describe(got))
		}
		if got.requeue <= 0 || got.requeue > refusalBackoffMax || got.condition == nil || got.machineCondition == nil {
			t.Errorf("%s: a refused cleanup must be reported on both objects and looked at again: %s", name, describe(got))
		}
		if (got.event != nil) != (s.refusals == 0) {
			t.Errorf("%s: one Event per refusal: %s", name, describe(got))
		}
	}
	// A deleted machine whose host was bound and may not be cleaned
	// waits: it goes only once a cleanup it was allowed finished.
	if s.deleting && !mayClean && got.removeFinalizer && s.phase != pending && s.phase != errored && s.phase != "" &&
		!(s.phase == cleaning && s.task == outcomeSucceeded) {
		t.Errorf("%s: the machine goes while its host's cleanup is refused: %s", name, describe(got))
	}
	if got.event != nil && eventAction(s) == "" {
		t.Errorf("%s: the Event %s has no action", name, got.event.Reason)
	}
}

func equalStep(a, b step) bool {
	ca, cb, ea, eb, ma, mb := a.condition, b.condition, a.event, b.event, a.machineCondition, b.machineCondition
	a.condition, b.condition, a.event, b.event, a.machineCondition, b.machineCondition = nil, nil, nil, nil, nil, nil
	if a != b || (ca == nil) != (cb == nil) || (ea == nil) != (eb == nil) || (ma == nil) != (mb == nil) {
		return false
	}
	return (ca == nil || *ca == *cb) && (ea == nil || *ea == *eb) && (ma == nil || *ma == *mb)
}
