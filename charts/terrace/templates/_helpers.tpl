{{/*
Names, labels and small shared pieces of the terrace chart.
*/}}

{{- define "terrace.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Fully qualified app name: the release name when it already contains the chart name
(`helm install terrace ...` gives `terrace`), else `<release>-<chart>`. Kept to 50
characters so that `<fullname>-api-server` and friends stay valid DNS labels.
*/}}
{{- define "terrace.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "terrace.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels on every object of the release. */}}
{{- define "terrace.labels" -}}
helm.sh/chart: {{ include "terrace.chart" . }}
{{ include "terrace.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: terrace
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "terrace.selectorLabels" -}}
app.kubernetes.io/name: {{ include "terrace.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Labels of one component: (dict "ctx" $ "component" "operator"). */}}
{{- define "terrace.componentLabels" -}}
{{ include "terrace.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "terrace.componentSelectorLabels" -}}
{{ include "terrace.selectorLabels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "terrace.operator.fullname" -}}
{{- printf "%s-operator" (include "terrace.fullname" .) }}
{{- end }}

{{- define "terrace.apiServer.fullname" -}}
{{- printf "%s-api-server" (include "terrace.fullname" .) }}
{{- end }}

{{- define "terrace.operator.serviceAccountName" -}}
{{- if .Values.operator.serviceAccount.create }}
{{- default (include "terrace.operator.fullname" .) .Values.operator.serviceAccount.name }}
{{- else }}
{{- required "operator.serviceAccount.name is required when operator.serviceAccount.create is false" .Values.operator.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "terrace.apiServer.serviceAccountName" -}}
{{- if .Values.apiServer.serviceAccount.create }}
{{- default (include "terrace.apiServer.fullname" .) .Values.apiServer.serviceAccount.name }}
{{- else }}
{{- required "apiServer.serviceAccount.name is required when apiServer.serviceAccount.create is false" .Values.apiServer.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The terrace image (operator, API server and the test Pods' init containers). */}}
{{- define "terrace.image" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{/* The engine image of test Pods. */}}
{{- define "terrace.engineImage" -}}
{{- if .Values.engine.image.digest }}
{{- printf "%s@%s" .Values.engine.image.repository .Values.engine.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.engine.image.repository .Values.engine.image.tag }}
{{- end }}
{{- end }}

{{/* Where test Pods reach the API server: the in-cluster Service unless overridden. */}}
{{/* The hostname runs' engines know terrace by: set explicitly, else the Ingress host. */}}
{{- define "terrace.hostname" -}}
{{- if .Values.apiServer.hostname }}
{{- .Values.apiServer.hostname }}
{{- else if .Values.apiServer.ingress.enabled }}
{{- .Values.apiServer.ingress.host }}
{{- end }}
{{- end }}

{{- define "terrace.apiInternalUrl" -}}
{{- if .Values.testRuns.apiInternalUrl }}
{{- .Values.testRuns.apiInternalUrl }}
{{- else }}
{{- printf "http://%s.%s.svc:%d" (include "terrace.apiServer.fullname" .) .Release.Namespace (int .Values.apiServer.service.port) }}
{{- end }}
{{- end }}

{{/* The API's external base URL: set explicitly, else from the Ingress host, else empty
(the API server then derives it from each request's Host header). */}}
{{- define "terrace.baseUrl" -}}
{{- if .Values.apiServer.baseUrl }}
{{- .Values.apiServer.baseUrl }}
{{- else if and .Values.apiServer.ingress.enabled .Values.apiServer.ingress.host }}
{{- printf "%s://%s" (ternary "https" "http" .Values.apiServer.ingress.tls.enabled) .Values.apiServer.ingress.host }}
{{- end }}
{{- end }}

{{/* The defaults of every test Pod as JSON, without the keys left empty. */}}
{{- define "terrace.testPodTemplate" -}}
{{- $t := dict }}
{{- range $k, $v := .Values.testRuns.podTemplate }}
{{- if $v }}
{{- $_ := set $t $k $v }}
{{- end }}
{{- end }}
{{- toJson $t }}
{{- end }}

{{/* Environment shared by both components: the Pod's name and namespace (leader
election identity, event reporting instance) and the log settings. */}}
{{- define "terrace.commonEnv" -}}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: TERRACE_LOG_FORMAT
  value: {{ .Values.logging.format | quote }}
- name: RUST_LOG
  value: {{ .Values.logging.level | quote }}
{{- end }}

{{/* An HTTP probe: (dict "path" "/healthz" "port" "http" "probe" .Values.x.livenessProbe). */}}
{{- define "terrace.httpProbe" -}}
httpGet:
  path: {{ .path }}
  port: {{ .port }}
{{ toYaml .probe }}
{{- end }}

{{/* The blob store settings, the same on the operator and the API server (the operator
deletes blobs: retention, deleted state versions). */}}
{{- define "terrace.blobStoreEnv" -}}
{{- $b := .Values.blobStore -}}
{{- if eq $b.type "s3" -}}
{{- if not $b.s3.bucket }}{{ fail "blobStore.s3.bucket is required with blobStore.type=s3" }}{{ end -}}
{{- $prefix := trimAll "/" $b.s3.prefix -}}
- name: TERRACE_BLOB_STORE
  value: {{ ternary (printf "s3://%s/%s" $b.s3.bucket $prefix) (printf "s3://%s" $b.s3.bucket) (ne $prefix "") | quote }}
{{- with $b.s3.endpoint }}
- name: TERRACE_S3_ENDPOINT
  value: {{ . | quote }}
{{- end }}
{{- with $b.s3.region }}
- name: TERRACE_S3_REGION
  value: {{ . | quote }}
{{- end }}
{{- if $b.s3.pathStyle }}
- name: TERRACE_S3_PATH_STYLE
  value: "true"
{{- end }}
{{- with $b.s3.credentialsSecret }}
- name: AWS_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      name: {{ . | quote }}
      key: AWS_ACCESS_KEY_ID
- name: AWS_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ . | quote }}
      key: AWS_SECRET_ACCESS_KEY
{{- end }}
{{- else -}}
- name: TERRACE_BLOB_STORE
  value: "cluster"
{{- end }}
{{- end }}
