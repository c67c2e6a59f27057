{{/* Names and labels shared by every object of the chart. */}}

{{- define "gpufleet.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The objects' base name: the release name, unless it already contains the chart's. */}}
{{- define "gpufleet.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if contains (include "gpufleet.name" .) .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name (include "gpufleet.name" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "gpufleet.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpufleet.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "gpufleet.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "gpufleet.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gpufleet
{{- end }}

{{- define "gpufleet.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "gpufleet.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "gpufleet.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* Namespace of the MIG manager's ConfigMap (default: the release's). */}}
{{- define "gpufleet.migNamespace" -}}
{{- default .Release.Namespace .Values.mig.configMapNamespace }}
{{- end }}

{{/*
The operator's settings file: the user's `config` with the settings the chart's other objects
depend on (the Lease its Role names, the metrics port its Service and probes use, the MIG
ConfigMap's namespace its Role is in, the policy ConfigMap its Role names) on top. Keys
follow gpufleet's settings root (gpufleet/settings.py).
*/}}
{{/* The admin settings: the policy ConfigMap, and the API's port and TLS when enabled. */}}
{{- define "gpufleet.adminConfig" -}}
namespace: {{ .Release.Namespace }}
policy_configmap: {{ .Values.policy.configMapName }}
{{- if .Values.admin.enabled }}
bind_address: 0.0.0.0
port: {{ .Values.admin.port }}
tls_cert_file: /etc/gpufleet-admin-tls/tls.crt
tls_key_file: /etc/gpufleet-admin-tls/tls.key
{{- end }}
{{- end }}

{{- define "gpufleet.config" -}}
{{- $chart := dict
  "lease" (dict "name" .Values.leaderElection.leaseName "namespace" .Release.Namespace "duration_s" .Values.leaderElection.leaseDurationSeconds)
  "metrics" (dict "bind_address" "0.0.0.0" "port" .Values.metrics.port)
  "scheduler" (dict "mig_config_map_namespace" (include "gpufleet.migNamespace" .))
  "admin" (include "gpufleet.adminConfig" . | fromYaml)
}}
{{- $config := mergeOverwrite (deepCopy .Values.config) $chart }}
{{- if kindIs "slice" .Values.jobPodTolerations }}
{{- /* Set, not merged: an empty list must replace the settings' default too. */}}
{{- $operator := get $config "operator" | default dict }}
{{- $_ := set $operator "pod_tolerations" .Values.jobPodTolerations }}
{{- $_ = set $config "operator" $operator }}
{{- end }}
{{- $config | toYaml }}
{{- end }}
