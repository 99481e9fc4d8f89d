{{ include "machine-step-header" . }}
# Packages from the OS's repositories that every node needs; installed
# ones are left as they are.
# bashible-timeout: 3600

case "$(bb-bundle)" in
{{- range $bundle, $packages := .versions.basePackages }}
  {{ $bundle }}) bb-package-install {{ join " " $packages }} ;;
{{- end }}
  *) bb-log "no base packages are listed for bundle $(bb-bundle)"; exit 1 ;;
esac
