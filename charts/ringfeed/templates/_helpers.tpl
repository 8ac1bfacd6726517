{{- define "ringfeed.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "ringfeed.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "ringfeed.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "ringfeed.serviceAccountName" -}}
{{- if .Values.rbac.serviceAccount.create -}}
{{- default (include "ringfeed.fullname" .) .Values.rbac.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.rbac.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- /* An image reference: [registry/]repository:tag[@digest], global.imageRegistry before the image's own registry
and the chart's appVersion for an empty tag. Call with (dict "image" <image values> "root" $). */ -}}
{{- define "ringfeed.image" -}}
{{- $registry := .root.Values.global.imageRegistry | default .image.registry -}}
{{- $reference := printf "%s:%s" .image.repository (.image.tag | default .root.Chart.AppVersion) -}}
{{- if $registry }}{{ $reference = printf "%s/%s" $registry $reference }}{{ end -}}
{{- if .image.digest }}{{ $reference = printf "%s@%s" $reference .image.digest }}{{ end -}}
{{- $reference -}}
{{- end -}}

{{- /* The Pods' imagePullSecrets (global.imagePullSecrets), as a Pod spec's field; empty when there are none. Use:
{{- with include "ringfeed.imagePullSecrets" . }}{{ . | nindent 6 }}{{ end }} */ -}}
{{- define "ringfeed.imagePullSecrets" -}}
{{- with .Values.global.imagePullSecrets -}}
imagePullSecrets:
{{- range . }}
  - name: {{ . }}
{{- end }}
{{- end }}
{{- end -}}

{{- /* The operator Pod's selector as a label selector string (k=v,k=v). */ -}}
{{- define "ringfeed.selectorString" -}}
{{- $pairs := list -}}
{{- range $key, $value := include "ringfeed.selectorLabels" . | fromYaml }}{{ $pairs = append $pairs (printf "%s=%s" $key $value) }}{{ end -}}
{{- join "," $pairs -}}
{{- end -}}

{{- /* The ServiceMonitor's, PodMonitors' and PrometheusRule's labels: monitoring.labels is what a Prometheus selects
them by (kube-prometheus-stack's: release: <its release>). */ -}}
{{- define "ringfeed.monitoringLabels" -}}
{{ include "ringfeed.labels" . }}
app.kubernetes.io/component: monitoring
{{- with .Values.monitoring.labels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- /* The operator's --network-policy: the chart's networkPolicy values with its own namespace and Pod labels. */ -}}
{{- define "ringfeed.networkPolicy" -}}
{{- $values := .Values.networkPolicy -}}
{{- dict
    "enabled" $values.enabled
    "operatorNamespace" .Release.Namespace
    "operatorPods" (include "ringfeed.selectorLabels" . | fromYaml)
    "cassOperatorNamespace" ($values.cassOperator.namespace | default .Release.Namespace)
    "cassOperatorPods" ($values.cassOperator.podLabels | default (dict "app.kubernetes.io/name" "cass-operator"))
    "monitoringNamespace" $values.monitoringNamespace
    "ringClients" $values.ringClients
  | toJson -}}
{{- end -}}
