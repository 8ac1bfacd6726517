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

{{- define "ringfeed.image" -}}
{{- printf "%s:%s" .image.repository (default .appVersion .image.tag) -}}
{{- end -}}

{{- /* Values the schema accepts but this chart cannot honour yet: fail with the reason instead of ignoring them. */ -}}
{{- define "ringfeed.validateValues" -}}
{{- $refused := list -}}
{{- range $name := list "serviceMonitor" "podMonitor" "prometheusRule" "dashboards" -}}
{{- if (index $.Values.monitoring $name).enabled -}}
{{- $refused = append $refused (printf "monitoring.%s.enabled: not rendered by this chart version yet" $name) -}}
{{- end -}}
{{- end -}}
{{- if $refused -}}
{{- fail (printf "\n%s\nScrape the metrics through the Service of monitoring.service (prometheus.io/scrape annotations) meanwhile." (join "\n" $refused)) -}}
{{- end -}}
{{- end -}}
