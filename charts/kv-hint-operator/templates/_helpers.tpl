{{/* Labels every object carries; part-of is config/'s own label. */}}
{{- define "kvhint.labels" -}}
app.kubernetes.io/part-of: kv-hint-operator
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
kvhint.injection is "true" when the sidecar injection is rendered: it is
enabled and the cluster serves MutatingAdmissionPolicy at
admissionregistration.k8s.io/v1 (Kubernetes 1.36 and later). Helm asks
the cluster on install and upgrade; `helm template` without a cluster
needs --api-versions admissionregistration.k8s.io/v1/MutatingAdmissionPolicy.
*/}}
{{- define "kvhint.injection" -}}
{{- if and .Values.injection.enable (.Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy") }}true{{ end -}}
{{- end }}

{{/* The manager's image: the tag defaults to the chart's appVersion. */}}
{{- define "kvhint.image" -}}
{{ .Values.manager.image.repository }}:{{ .Values.manager.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* The injected sidecar's image: the manager's unless set. */}}
{{- define "kvhint.sidecarImage" -}}
{{- $repo := .Values.injection.image.repository | default .Values.manager.image.repository -}}
{{- $tag := .Values.injection.image.tag | default .Values.manager.image.tag | default .Chart.AppVersion -}}
{{ $repo }}:{{ $tag }}
{{- end }}

{{/*
kvhint.file renders one YAML file of files/ (a copy of config/, kept
current by `make manifests`) with the chart's labels added.
*/}}
{{- define "kvhint.file" -}}
{{- $obj := .root.Files.Get .path | fromYaml -}}
{{- if hasKey $obj "Error" }}{{ fail (printf "%s: %s" .path $obj.Error) }}{{ end -}}
{{- $_ := set $obj.metadata "labels" (merge (default (dict) (get $obj.metadata "labels")) (include "kvhint.labels" .root | fromYaml)) -}}
{{- range $k, $v := (default (dict) (get . "annotations")) }}
{{- $_ := set $obj.metadata "annotations" (merge (default (dict) (get $obj.metadata "annotations")) (dict $k $v)) -}}
{{- end }}
{{ toYaml $obj }}
{{- end }}
