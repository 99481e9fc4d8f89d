{{- /* The first lines of every built-in step. */ -}}
{{- define "step-header" -}}
#!/usr/bin/env bash
# Managed by node-manager for node group {{ .nodeGroup.name }}; changes are overwritten.
set -Eeuo pipefail
{{- end -}}

{{- /* The first lines of a step that configures the machine itself. Tests
       that run bashible with its root redirected (BASHIBLE_ROOT) drop these
       steps; the guard makes a forgotten one fail instead of touching the
       machine the test runs on. */ -}}
{{- define "machine-step-header" -}}
{{ include "step-header" . }}
if [[ -n "${BASHIBLE_ROOT:-}" ]]; then
  echo "this step configures the machine itself and does not run with BASHIBLE_ROOT=$BASHIBLE_ROOT" >&2
  exit 1
fi
{{- end -}}
