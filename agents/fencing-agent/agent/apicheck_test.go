package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestWhatCountsAsAnAnswerFromTheAPI(t *testing.T) {
	nodes := schema.GroupResource{Resource: "nodes"}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"the Node", nil, true},
		{"403: up, refusing", apierrors.NewForbidden(nodes, "n1", errors.New("no")), true},
		{"401: up, refusing", apierrors.NewUnauthorized("expired"), true},
		{"404: up, the Node is gone", apierrors.NewNotFound(nodes, "n1"), true},
		{"timeout", context.DeadlineExceeded, false},
		{"connection refused", &net.OpError{Op: "dial", Err: errors.New("connection refused")}, false},
		{"wrapped refusal", fmt.Errorf("get: %w", &net.OpError{Op: "dial", Err: errors.New("connection refused")}), false},
		{"503: cannot serve", apierrors.NewServiceUnavailable("etcd"), false},
		{"500", apierrors.NewInternalError(errors.New("boom")), false},
		{"504 server timeout", apierrors.NewTimeoutError("slow", 1), false},
		{"429", apierrors.NewTooManyRequests("slow down", 1), false},
	} {
		if got := Answered(tc.err); got != tc.want {
			t.Errorf("%s: Answered = %v, want %v", tc.name, got, tc.want)
		}
	}
}
