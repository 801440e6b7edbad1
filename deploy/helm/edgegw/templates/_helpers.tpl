{{- define "edgegw.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "edgegw.fullname" -}}
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

{{- define "edgegw.selectorLabels" -}}
app.kubernetes.io/name: {{ include "edgegw.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "edgegw.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "edgegw.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* edgegw's provider ids (edgegw/providers.py; tests/test_helm_chart.py keeps them equal). */}}
{{- define "edgegw.providerIds" -}}
openai anthropic cohere groq cloudflare ollama ollama_cloud google deepseek mistral minimax moonshot nvidia llamacpp zai
{{- end }}

{{/* Where the config file and the client keys are mounted. */}}
{{- define "edgegw.configPath" -}}/etc/edgegw/config.yaml{{- end }}
{{- define "edgegw.clientKeysPath" -}}/etc/edgegw/client-keys/keys{{- end }}

{{/* Seconds from preStop to SIGKILL: the preStop sleep, the drain, edgegw's own margin after
it (edgegw/server.py DRAIN_MARGIN_S, 5 s), and 5 s for the processes to exit. */}}
{{- define "edgegw.terminationGracePeriodSeconds" -}}
{{- add .Values.drain.preStopSleepSeconds .Values.drain.gracefulTimeoutSeconds 5 5 }}
{{- end }}

{{/* The config file: .Values.config, and localModels as its local_models. */}}
{{- define "edgegw.configFile" -}}
{{- $file := deepCopy .Values.config }}
{{- if .Values.localModels }}
{{- $_ := set $file "local_models" .Values.localModels }}
{{- end }}
{{- toYaml $file }}
{{- end }}

{{/* Refuse values that would deploy something edgegw does not do as asked. */}}
{{- define "edgegw.checks" -}}
{{- if hasKey .Values "redis" }}
{{- fail "redis is reserved for the tenants feature: edgegw reads no Redis URL yet, so the chart sets none" }}
{{- end }}
{{- $owned := list "SERVER_HOST" "SERVER_PORT" "SERVER_GRACEFUL_TIMEOUT" "SERVER_SHUTDOWN_DELAY" "EDGEGW_WORKERS" "EDGEGW_API_KEYS" "EDGEGW_API_KEYS_FILE" "TELEMETRY_ENABLED" "TELEMETRY_ENABLE" "TELEMETRY_METRICS_PORT" "LOCAL_MODELS" }}
{{- range $key, $_ := .Values.config }}
{{- $name := upper $key }}
{{- if has $name $owned }}
{{- fail (printf "config.%s: the chart sets it from its own values (README \"Kubernetes (Helm)\")" $key) }}
{{- end }}
{{- if or (hasSuffix "_API_KEY" $name) (hasSuffix "_API_URL" $name) }}
{{- fail (printf "config.%s: a provider's key or URL goes under providers (its key from a Secret), not into the ConfigMap" $key) }}
{{- end }}
{{- end }}
{{- $ids := splitList " " (include "edgegw.providerIds" .) }}
{{- range $id, $p := .Values.providers }}
{{- if not (has $id $ids) }}
{{- fail (printf "providers.%s: edgegw has no such provider (%s)" $id (join ", " $ids)) }}
{{- end }}
{{- if not (or $p.url $p.secretName) }}
{{- fail (printf "providers.%s: give a secretName (its key) or a url" $id) }}
{{- end }}
{{- if and $p.secretName (not $p.secretKey) }}
{{- fail (printf "providers.%s: secretKey names the key of Secret %s that holds the provider key" $id $p.secretName) }}
{{- end }}
{{- end }}
{{- if and .Values.autoscaling.enabled (not (dig "requests" "cpu" "" .Values.resources)) }}
{{- fail "autoscaling.enabled needs resources.requests.cpu (the HPA's target is a share of it)" }}
{{- end }}
{{- if and .Values.metrics.serviceMonitor.enabled (not .Values.metrics.enabled) }}
{{- fail "metrics.serviceMonitor.enabled needs metrics.enabled (edgegw serves /metrics only with TELEMETRY_ENABLED)" }}
{{- end }}
{{- end }}
