{{- define "tttrace.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "tttrace.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "tttrace.labels" -}}
{{ include "tttrace.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- /* OTEL_RESOURCE_ATTRIBUTES: the node (downward API, NODE_NAME), this
pod as the service's instance (POD_UID), then otlp.resourceAttributes. */ -}}
{{- define "tttrace.otlpResource" -}}
k8s.node.name=$(NODE_NAME),service.instance.id=$(POD_UID)
{{- range $k, $v := .Values.otlp.resourceAttributes }},{{ $k }}={{ $v }}{{ end }}
{{- end -}}
