{{ include "machine-step-header" . }}
# Packages from the OS's repositories that every node needs; installed
# ones are left as they are.
# bashible-timeout: 3600

# runc is for the containerd node-manager installs; a runtime that is not
# node-manager's (cri.type NotManaged), or a runc already on the machine
# (Docker's containerd.io ships one), is left alone.
packages=()
case "$(bb-bundle)" in
{{- range $bundle, $packages := .versions.basePackages }}
  {{ $bundle | squote }}) packages=({{ range $i, $p := $packages }}{{ if $i }} {{ end }}{{ $p | squote }}{{ end }}) ;;
{{- end }}
  *) bb-log "no base packages are listed for bundle $(bb-bundle)"; exit 1 ;;
esac
{{- if eq .cri "NotManaged" }}
skip_runc=yes
{{- else }}
skip_runc=no
if command -v runc > /dev/null; then
  skip_runc=yes
fi
{{- end }}
if [[ "$skip_runc" == yes ]]; then
  for i in "${!packages[@]}"; do
    if [[ "${packages[$i]}" == runc ]]; then
      unset 'packages[i]'
    fi
  done
fi
bb-package-install "${packages[@]}"
