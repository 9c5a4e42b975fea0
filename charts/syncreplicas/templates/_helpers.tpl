{{/*
Names and labels shared by every template.
*/}}

{{/* The chart name, overridable with nameOverride. */}}
{{- define "syncreplicas.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The fully qualified app name, at most 63 characters (the DNS label limit). The release
name is used alone when it already contains the chart name.
*/}}
{{- define "syncreplicas.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Name of the operator's objects (Deployment, Service, monitors). */}}
{{- define "syncreplicas.operatorName" -}}
{{- printf "%s-operator" (include "syncreplicas.fullname" . | trunc 54 | trimSuffix "-") }}
{{- end }}

{{/* Chart name and version, for the helm.sh/chart label. */}}
{{- define "syncreplicas.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels on every object of the release. */}}
{{- define "syncreplicas.labels" -}}
helm.sh/chart: {{ include "syncreplicas.chart" . }}
app.kubernetes.io/name: {{ include "syncreplicas.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: syncreplicas
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Labels of the operator's own objects. */}}
{{- define "syncreplicas.operatorLabels" -}}
{{ include "syncreplicas.labels" . }}
app.kubernetes.io/component: operator
{{- end }}

{{/* Labels that select the operator's pods; never change them after the first release. */}}
{{- define "syncreplicas.selectorLabels" -}}
app.kubernetes.io/name: {{ include "syncreplicas.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{/* The ServiceAccount the operator runs as. */}}
{{- define "syncreplicas.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "syncreplicas.operatorName" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The namespaces the operator watches, as a JSON list (read it with fromJsonArray):
watchNamespaces, then the deprecated watchNamespace, each once. Empty: every namespace.
*/}}
{{- define "syncreplicas.watchNamespaces" -}}
{{- $namespaces := list }}
{{- range .Values.watchNamespaces }}
{{- $namespaces = append $namespaces . }}
{{- end }}
{{- with .Values.watchNamespace }}
{{- $namespaces = append $namespaces . }}
{{- end }}
{{- $namespaces | uniq | toJson }}
{{- end }}

{{/* An image reference: repository:tag, or repository@digest when a digest is set. */}}
{{- define "syncreplicas.image" -}}
{{- $image := .image -}}
{{- if $image.digest -}}
{{- printf "%s@%s" $image.repository $image.digest -}}
{{- else -}}
{{- printf "%s:%s" $image.repository (default .defaultTag $image.tag) -}}
{{- end -}}
{{- end }}

{{/* The operator image. */}}
{{- define "syncreplicas.operatorImage" -}}
{{- include "syncreplicas.image" (dict "image" .Values.image "defaultTag" .Chart.AppVersion) }}
{{- end }}

{{/* The runtime image the operator gives job pods that name none. */}}
{{- define "syncreplicas.runtimeImage" -}}
{{- include "syncreplicas.image" (dict "image" .Values.runtimeImage "defaultTag" .Chart.AppVersion) }}
{{- end }}

{{/*
True ("true") when the Prometheus Operator's API is served by the cluster (or passed with
`helm template --api-versions monitoring.coreos.com/v1`).
*/}}
{{- define "syncreplicas.hasMonitoringAPI" -}}
{{- if .Capabilities.APIVersions.Has "monitoring.coreos.com/v1" }}true{{ end }}
{{- end }}

{{/* The namespace of the dashboard ConfigMap (the Grafana sidecar may watch another one). */}}
{{- define "syncreplicas.dashboardNamespace" -}}
{{- default .Release.Namespace .Values.monitoring.dashboards.namespace }}
{{- end }}
