// Package manifests is node-manager's deployment, as the files beside this
// one (CRDs, RBAC, Deployments, admission policies, monitoring), embedded
// for the tests that check them against the code. Tests read them from
// here rather than from disk: go test then keys its cached result on the
// files' content, where a file opened at run time is compared by its path
// and modification time, which every fresh clone changes.
package manifests

import "embed"

// FS holds every file of manifests/, by its path below it
// ("crds/deckhouse.io_nodegroups.yaml").
//
//go:embed *
var FS embed.FS
