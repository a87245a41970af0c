{{/* The objects' name: the release's, with the chart's name unless the release already says it. */}}
{{- define "fastrepl.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "fastrepl.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: relay
{{- end -}}

{{- define "fastrepl.labels" -}}
{{ include "fastrepl.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: fastrepl
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "fastrepl.tokenSecret" -}}
{{- if .Values.token.create -}}{{ include "fastrepl.fullname" . }}-token{{- else -}}{{ required "token.existingSecret (or token.create with token.value) is required: the relay never runs without a token in a cluster" .Values.token.existingSecret }}{{- end -}}
{{- end -}}
