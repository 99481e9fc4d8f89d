package agent

import (
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Answered reports whether the result of the API check (a GET of the
// agent's own Node) is an answer from kube-apiserver. Success is; so is an
// authoritative refusal (401, 403, 404, 409...): a server that refuses is
// up and reachable, so this node is not cut off (Deckhouse's first agent
// counted only timeouts, for the same reason). Not answers: a timeout, a
// refused or reset connection, a TLS failure, 429 and 5xx (an API that
// cannot serve, such as one whose etcd is gone, proves nothing about this
// node's reach either way, so gossip decides).
func Answered(err error) bool {
	if err == nil {
		return true
	}
	status, ok := err.(apierrors.APIStatus)
	if !ok {
		return false
	}
	code := status.Status().Code
	return code >= 400 && code < 500 && code != 429
}
