{{- define "kraftsman.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kraftsman.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kraftsman.labels" -}}
{{ include "kraftsman.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "kraftsman.serviceAccountName" -}}
{{- default (include "kraftsman.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "kraftsman.claimName" -}}
{{- default (printf "%s-state" (include "kraftsman.fullname" .)) .Values.state.persistentVolumeClaim.existingClaim -}}
{{- end -}}

{{- define "kraftsman.plannerServiceAccountName" -}}
{{- default (printf "%s-planner" (include "kraftsman.fullname" .)) .Values.planner.serviceAccount.name -}}
{{- end -}}

{{- define "kraftsman.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
