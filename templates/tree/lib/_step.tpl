{{- /* The first lines of every built-in step. */ -}}
{{- define "step-header" -}}
#!/usr/bin/env bash
# Managed by node-manager for node group {{ .nodeGroup.name }}; changes are overwritten.
set -Eeuo pipefail
{{- end -}}

{{- /* write-if-changed <path>: a bash function call that replaces <path>
       with stdin only when the content differs, and says so. */ -}}
{{- define "write-if-changed" -}}
write_if_changed() {
  local path=$1 tmp
  tmp=$(mktemp "${path}.XXXXXX")
  cat > "$tmp"
  if [[ -f "$path" ]] && cmp -s "$tmp" "$path"; then
    rm -f "$tmp"
    return 1
  fi
  chmod 0644 "$tmp"
  mv -f "$tmp" "$path"
  echo "updated $path"
}
{{- end -}}
