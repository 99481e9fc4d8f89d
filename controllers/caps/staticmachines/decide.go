package staticmachines

import (
	"fmt"
	"time"

	deckhousev1alpha2 "github.com/node-manager/node-manager/apiserver/apis/deckhouse/v1alpha2"
	infrav1alpha1 "github.com/node-manager/node-manager/apiserver/apis/infrastructure/v1alpha1"
)

// taskKind is an SSH operation on a host.
type taskKind string

const (
	taskNone      taskKind = ""
	taskBootstrap taskKind = "bootstrap"
	taskAdopt     taskKind = "adopt"
	taskCleanup   taskKind = "cleanup"
)

// outcome is how the host's last SSH operation ended, as decide needs it.
type outcome int

const (
	// outcomeNone: no operation of the asked kind has run (or its result was used).
	outcomeNone outcome = iota
	outcomeRunning
	outcomeSucceeded
	// outcomeFailed: it could not reach the host, the host dropped the
	// session, or the script exited non-zero. Tried again: the scripts
	// resume where an interrupted run stopped.
	outcomeFailed
	// outcomeRefused: the host refused the login or showed another host
	// key. Trying again cannot help until a person fixes the credentials.
	outcomeRefused
)

// situation is everything decide looks at, already read from the cluster.
type situation struct {
	now time.Time
	// deleting: the StaticMachine is being deleted (its Machine goes).
	deleting bool
	// phase and since: the bound instance's phase and when it changed.
	phase deckhousev1alpha2.StaticInstancePhase
	since time.Time
	// adopt: the instance carries skip-bootstrap-phase.
	adopt bool
	// matches: the instance's labels still match the machine's selector.
	matches bool
	// nodeReady: the Node with the machine's providerID exists and
	// carries the configuration checksum (bashible has configured it).
	nodeReady bool
	// controlPlane: the instance's Node is a control-plane node, and
	// allowControlPlane: a person said CAPS may still adopt or clean it.
	controlPlane, allowControlPlane bool
	// address is the host's; foreignNode a Node there that is not this
	// machine's ("": none). Such a host is never bootstrapped, adopted or
	// cleaned for this machine.
	address, foreignNode string
	// hostKeyNotPinned: the instance has no pinned host key and no leave
	// to trust on first use, so its host may not be contacted (hostkey.go).
	hostKeyNotPinned bool
	// refusals: how many syncs in a row refused this host's cleanup (the
	// backoff of the next look, and one Event per refusal).
	refusals int
	// task: the last operation of the kind the phase needs, how it ended,
	// and when.
	task         outcome
	taskFinished time.Time
	taskMessage  string

	bootstrapTimeout, cleanupTimeout time.Duration
}

// step is what sync does about a bound instance. Zero fields mean "leave
// as is".
type step struct {
	// phase is the instance's new phase.
	phase deckhousev1alpha2.StaticInstancePhase
	// run starts this SSH operation on the host (unless one is running).
	run taskKind
	// release unbinds the instance from the machine (machineRef and
	// nodeRef cleared), so the machine picks another host and the host is
	// free for any machine.
	release bool
	// provisioned marks the StaticMachine provisioned with the Node's
	// addresses, and the instance's nodeRef.
	provisioned bool
	// dropAdoption removes the skip-bootstrap-phase annotation.
	dropAdoption bool
	// deleteMachine deletes the machine's Machine: the instance left the group.
	deleteMachine bool
	// removeFinalizer lets the deleted StaticMachine go.
	removeFinalizer bool
	// condition is set on the instance (type, status, reason, message).
	condition *conditionChange
	// event is recorded on the instance.
	event *eventNote
	// requeue looks again after this long (0: on the next change only).
	requeue time.Duration
	// refused: the step refuses to clean the host (sync counts them).
	refused bool
	// machineCondition is set on the StaticMachine.
	machineCondition *conditionChange
}

type conditionChange struct {
	Type, Reason, Message string
	True                  bool
}

type eventNote struct {
	Warning      bool
	Reason, Note string
}

// The instance conditions.
const (
	condBootstrapped = "Bootstrapped"
	condCleaned      = "Cleaned"
	condCredentials  = "CredentialsReady"
	// condMachineReady is the StaticMachine's Ready condition, which
	// Cluster API shows as its Machine's InfrastructureReady.
	condMachineReady = "Ready"
)

// reasonAdopted is the Bootstrapped reason of an adopted node: until the
// next binding, its Node may be the one at its address without a
// providerID (findNode).
const reasonAdopted = "Adopted"

// Retry delays: after a failed SSH operation, and while one runs (the
// operation's end also requeues at once).
const (
	retryAfterFailure = 15 * time.Second
	pollWhileRunning  = 30 * time.Second
	waitForNode       = 10 * time.Second
	refusedRecheck    = time.Minute
	// A refused cleanup is looked at again after 5 s, doubling up to 5
	// minutes (and at once when the instance or a Node at its address
	// changes).
	refusalBackoffMin = 5 * time.Second
	refusalBackoffMax = 5 * time.Minute
)

// refusalBackoff is the wait after the n-th refusal in a row (from 0).
func refusalBackoff(n int) time.Duration {
	d := refusalBackoffMin
	for range n {
		if d *= 2; d >= refusalBackoffMax {
			return refusalBackoffMax
		}
	}
	return d
}

// decide is the life of a bound instance (the machine already has its
// host). Every branch either changes something or waits; none rewrites a
// status that has not changed (sync compares before writing). A host whose
// key is not trusted is never contacted: whatever would run an SSH
// operation on it is refused instead (Error, HostKeyNotPinned, released).
func decide(s situation) step {
	st := decideTrusted(s)
	if st.run != "" && s.hostKeyNotPinned {
		return refuseUnpinned()
	}
	return st
}

func decideTrusted(s situation) step {
	if s.deleting {
		return decideDeleting(s)
	}
	switch s.phase {
	case deckhousev1alpha2.StaticInstanceBootstrapping:
		if s.adopt {
			return decideAdoption(s)
		}
		return decideBootstrap(s)
	case deckhousev1alpha2.StaticInstanceRunning:
		if !s.matches {
			return step{deleteMachine: true, event: &eventNote{Reason: "StaticInstanceNodeGroupLeaved",
				Note: "the instance's labels no longer match its group's staticInstances.labelSelector: its machine is deleted, so the host is drained, cleaned and released"}}
		}
		return step{provisioned: s.nodeReady}
	case deckhousev1alpha2.StaticInstanceCleaning:
		return decideCleaning(s)
	case deckhousev1alpha2.StaticInstanceError:
		// The host could not be used (its condition says why): free the
		// machine to pick another.
		return step{release: true}
	default: // Pending or none while bound: the binding just happened.
		// The Bootstrapped condition starts over (an earlier adoption's
		// "Adopted" no longer holds).
		if s.adopt {
			return step{phase: deckhousev1alpha2.StaticInstanceBootstrapping,
				condition: &conditionChange{Type: condBootstrapped, Reason: "Adopting", Message: "the running node is being handed over to CAPS"}}
		}
		return step{phase: deckhousev1alpha2.StaticInstanceBootstrapping,
			condition: &conditionChange{Type: condBootstrapped, Reason: "Bootstrapping", Message: "the host is being bootstrapped"}}
	}
}

// cleanupRefusal is why the host may not be cleaned (nil: it may): it is
// another node than this machine's, or a control-plane node without
// allow-control-plane.
func cleanupRefusal(s situation) *conditionChange {
	switch {
	case s.foreignNode != "":
		return &conditionChange{Type: condCleaned, Reason: "ForeignNodeCleanupRefused",
			Message: fmt.Sprintf("the host's address %s is the address of Node %s, which is not this machine's Node: CAPS does not clean it. "+
				"If Node %s no longer exists, delete it (kubectl delete node %s) and the cleanup goes on", s.address, s.foreignNode, s.foreignNode, s.foreignNode)}
	case s.controlPlane && !s.allowControlPlane:
		return &conditionChange{Type: condCleaned, Reason: "ControlPlaneCleanupRefused",
			Message: "the host is a control-plane node: CAPS cleans it only with the annotation static.node.deckhouse.io/allow-control-plane=true"}
	}
	return nil
}

// refuseCleanup keeps a deleted machine waiting for a cleanup it may not
// run: reported on the instance and the StaticMachine (and an Event the
// first time), looked at again with backoff, and at once when the
// instance or a Node at its address changes; it goes on once the refusal
// no longer holds.
func refuseCleanup(s situation, why *conditionChange) step {
	why.Message += "; its machine waits until then"
	st := step{requeue: refusalBackoff(s.refusals), refused: true, condition: why,
		machineCondition: &conditionChange{Type: condMachineReady, Reason: infrav1alpha1.CleanupRefusedReason, Message: why.Message}}
	if s.refusals == 0 {
		st.event = &eventNote{Warning: true, Reason: why.Reason, Note: why.Message}
	}
	return st
}

// abandon releases a host without touching it more: the machine picks
// another host. A host that turned out to be another node goes Pending,
// and the instance's own address check (syncFree) reports it AddressInUse
// while the other Node is there; a host CAPS may not clean for another
// reason (a control-plane node) goes Error, so it is not picked again at
// once.
func abandon(s situation, cond *conditionChange) step {
	phase := deckhousev1alpha2.StaticInstancePending
	if s.foreignNode == "" {
		phase = deckhousev1alpha2.StaticInstanceError
	}
	return step{phase: phase, release: true, condition: cond,
		event: &eventNote{Warning: true, Reason: cond.Reason, Note: cond.Message}}
}

// foreignAddress is the Bootstrapped condition of a host abandoned because
// another Node has its address.
func foreignAddress(s situation) *conditionChange {
	return &conditionChange{Type: condBootstrapped, Reason: reasonAddressUsed,
		Message: fmt.Sprintf("the host's address %s is the address of Node %s, which is not this machine's Node: "+
			"CAPS released the host without bootstrapping, adopting or cleaning it", s.address, s.foreignNode)}
}

func decideBootstrap(s situation) step {
	if s.nodeReady {
		return step{phase: deckhousev1alpha2.StaticInstanceRunning, provisioned: true,
			condition: &conditionChange{Type: condBootstrapped, True: true, Reason: "NodeJoined", Message: "the host's Node joined with the machine's providerID and bashible configured it"},
			event:     &eventNote{Reason: "NodeBootstrappingSucceeded", Note: "the host's Node joined"}}
	}
	if s.foreignNode != "" {
		return abandon(s, foreignAddress(s))
	}
	if s.now.Sub(s.since) >= s.bootstrapTimeout {
		if why := cleanupRefusal(s); why != nil {
			return abandon(s, &conditionChange{Type: condBootstrapped, Reason: "BootstrapTimeoutReached",
				Message: fmt.Sprintf("no Node joined within %s of the bootstrap's start; the host is released but not cleaned: %s", s.bootstrapTimeout, why.Message)})
		}
		return step{phase: deckhousev1alpha2.StaticInstanceCleaning, run: taskCleanup,
			condition: &conditionChange{Type: condBootstrapped, Reason: "BootstrapTimeoutReached",
				Message: fmt.Sprintf("no Node joined within %s of the bootstrap's start; the host is cleaned and released", s.bootstrapTimeout)},
			event: &eventNote{Warning: true, Reason: "StaticInstanceBootstrapTimeoutReached",
				Note: fmt.Sprintf("bootstrap did not finish within %s; cleaning and releasing the host", s.bootstrapTimeout)}}
	}
	return runOrWait(s, taskBootstrap, condBootstrapped, "the bootstrap script succeeded; waiting for the Node to join")
}

func decideAdoption(s situation) step {
	if s.controlPlane && !s.allowControlPlane {
		return step{phase: deckhousev1alpha2.StaticInstancePending, release: true, requeue: refusedRecheck,
			condition: &conditionChange{Type: condBootstrapped, Reason: "ControlPlaneAdoptionRefused",
				Message: "the host is a control-plane node: CAPS adopts it only with the annotation static.node.deckhouse.io/allow-control-plane=true"},
			event: &eventNote{Warning: true, Reason: "ControlPlaneAdoptionRefused", Note: "refused to adopt a control-plane node"}}
	}
	if s.foreignNode != "" {
		return abandon(s, foreignAddress(s))
	}
	if s.task == outcomeSucceeded {
		return step{phase: deckhousev1alpha2.StaticInstanceRunning, provisioned: true, dropAdoption: true,
			condition: &conditionChange{Type: condBootstrapped, True: true, Reason: reasonAdopted, Message: "the running node was handed over without a bootstrap"},
			event:     &eventNote{Reason: "AdoptionSucceeded", Note: "the host's provider id and machine name were written; the node is now managed by CAPS"}}
	}
	return runOrWait(s, taskAdopt, condBootstrapped, "")
}

func decideCleaning(s situation) step {
	done := step{phase: deckhousev1alpha2.StaticInstancePending, release: true, removeFinalizer: s.deleting}
	if s.task == outcomeSucceeded {
		done.condition = &conditionChange{Type: condCleaned, True: true, Reason: "CleanupScriptSucceeded", Message: "the host was cleaned and is free again"}
		done.event = &eventNote{Reason: "CleanupScriptSucceeded", Note: "the host was cleaned and is Pending again"}
		return done
	}
	// Checked before every run (a restart, or a Node that came since the
	// phase began) and before the timeout, whose message asks a person to
	// clean the host by hand. A cleanup started before the refusal came
	// cannot be stopped: wait for its end, then decide.
	if why := cleanupRefusal(s); why != nil {
		if s.task == outcomeRunning {
			return step{requeue: pollWhileRunning}
		}
		if s.deleting {
			return refuseCleanup(s, why)
		}
		why.Message = "the host is released but not cleaned: " + why.Message
		return abandon(s, why)
	}
	if s.now.Sub(s.since) >= s.cleanupTimeout {
		done.condition = &conditionChange{Type: condCleaned, Reason: "CleanupTimeoutReached",
			Message: fmt.Sprintf("cleanup did not finish within %s; the host is Pending again but may hold leftovers: run /var/lib/bashible/cleanup_static_node.sh on it", s.cleanupTimeout)}
		done.event = &eventNote{Warning: true, Reason: "StaticInstanceCleanupTimeoutReached",
			Note: fmt.Sprintf("cleanup did not finish within %s; the host was released anyway", s.cleanupTimeout)}
		return done
	}
	return runOrWait(s, taskCleanup, condCleaned, "")
}

func decideDeleting(s situation) step {
	switch s.phase {
	case deckhousev1alpha2.StaticInstanceCleaning:
		return decideCleaning(s)
	case deckhousev1alpha2.StaticInstanceRunning, deckhousev1alpha2.StaticInstanceBootstrapping:
		if why := cleanupRefusal(s); why != nil {
			return refuseCleanup(s, why)
		}
		return step{phase: deckhousev1alpha2.StaticInstanceCleaning, run: taskCleanup,
			machineCondition: &conditionChange{Type: condMachineReady, Reason: "Cleaning", Message: "the machine is deleted: its host is being cleaned"}}
	default:
		// Never bootstrapped (Pending, Error): nothing on the host to undo.
		return step{release: true, removeFinalizer: true}
	}
}

// runOrWait handles an operation of kind that has not succeeded yet: start
// it, wait for it, try it again a while after a failure, or stop on a
// refusal (Error, with the reason in the condition).
func runOrWait(s situation, kind taskKind, cond, succeededWait string) step {
	switch s.task {
	case outcomeRunning:
		return step{requeue: pollWhileRunning}
	case outcomeSucceeded:
		// The script finished but no Node yet: look again, and run the
		// script once more a while later (it is idempotent; a host whose
		// bashible is already running is left alone).
		if wait := s.taskFinished.Add(time.Minute).Sub(s.now); wait > 0 {
			return step{requeue: min(wait, waitForNode),
				condition: &conditionChange{Type: cond, Reason: "WaitingForNode", Message: succeededWait}}
		}
		return step{run: kind}
	case outcomeRefused:
		return step{phase: deckhousev1alpha2.StaticInstanceError, release: true,
			condition: &conditionChange{Type: condCredentials, Reason: "LoginRefused", Message: s.taskMessage},
			event:     &eventNote{Warning: true, Reason: "StaticInstanceCredentialsUnavailable", Note: s.taskMessage}}
	case outcomeFailed:
		if wait := s.taskFinished.Add(retryAfterFailure).Sub(s.now); wait > 0 {
			return step{requeue: wait, condition: &conditionChange{Type: cond, Reason: "AttemptFailed", Message: s.taskMessage + "; trying again"}}
		}
		return step{run: kind}
	default:
		return step{run: kind}
	}
}

// describe is a step for logs and test failures.
func describe(s step) string {
	out := fmt.Sprintf("{phase:%q run:%q release:%t provisioned:%t dropAdoption:%t deleteMachine:%t removeFinalizer:%t requeue:%s refused:%t",
		s.phase, s.run, s.release, s.provisioned, s.dropAdoption, s.deleteMachine, s.removeFinalizer, s.requeue, s.refused)
	if s.condition != nil {
		out += fmt.Sprintf(" condition:%+v", *s.condition)
	}
	if s.machineCondition != nil {
		out += fmt.Sprintf(" machineCondition:%+v", *s.machineCondition)
	}
	if s.event != nil {
		out += fmt.Sprintf(" event:%+v", *s.event)
	}
	return out + "}"
}
