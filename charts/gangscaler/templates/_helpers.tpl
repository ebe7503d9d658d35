{{/*
Names. The release's objects are named after "gangscaler.fullname": the release name when it
already contains the chart name, else "<release>-<chart>", cut to 63 characters.
*/}}
{{- define "gangscaler.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "gangscaler.fullname" -}}
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

{{- define "gangscaler.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels on every object. */}}
{{- define "gangscaler.labels" -}}
helm.sh/chart: {{ include "gangscaler.chart" . }}
{{ include "gangscaler.selectorLabels" . }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: cluster-autoscaler
{{- with .Values.additionalLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Labels that select the release's pods (stable across upgrades). */}}
{{- define "gangscaler.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gangscaler.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Annotations on every object, when set. */}}
{{- define "gangscaler.annotations" -}}
{{- with .Values.additionalAnnotations -}}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{- define "gangscaler.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "gangscaler.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "gangscaler.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag }}
{{- if .Values.image.digest }}
{{- printf "%s:%s@%s" .Values.image.repository $tag .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{/* Secret holding the server certificate, its key and the CA that client certificates must chain to. */}}
{{- define "gangscaler.serverTlsSecret" -}}
{{- if .Values.certManager.enabled }}
{{- printf "%s-server-tls" (include "gangscaler.fullname" .) }}
{{- else }}
{{- default (printf "%s-tls" (include "gangscaler.fullname" .)) .Values.tls.existingSecret }}
{{- end }}
{{- end }}

{{/* Secret holding Cluster Autoscaler's client certificate (cert-manager only). */}}
{{- define "gangscaler.clientTlsSecret" -}}
{{- default (printf "%s-autoscaler-tls" (include "gangscaler.fullname" .)) .Values.certManager.client.secretName }}
{{- end }}

{{- define "gangscaler.cloudConfigSecret" -}}
{{- default (printf "%s-cloud-config" (include "gangscaler.fullname" .)) .Values.clusterAutoscaler.cloudConfig.secretName }}
{{- end }}

{{- define "gangscaler.auditClaim" -}}
{{- default (printf "%s-audit" (include "gangscaler.fullname" .)) .Values.audit.persistence.existingClaim }}
{{- end }}

{{/* host:port for a listener; IPv6 addresses get brackets. */}}
{{- define "gangscaler.listen" -}}
{{- $host := index . 0 }}
{{- $port := index . 1 }}
{{- if contains ":" $host }}
{{- printf "[%s]:%v" $host $port }}
{{- else }}
{{- printf "%s:%v" $host $port }}
{{- end }}
{{- end }}

{{/* The in-cluster DNS name Cluster Autoscaler dials (its SAN must be in the server certificate). */}}
{{- define "gangscaler.serviceHost" -}}
{{- printf "%s.%s.svc" (include "gangscaler.fullname" .) .Release.Namespace }}
{{- end }}

{{/* Paths inside the container. */}}
{{- define "gangscaler.configDir" -}}/etc/gangscaler/config{{- end }}
{{- define "gangscaler.nodeGroupsDir" -}}/etc/gangscaler/nodegroups{{- end }}
{{- define "gangscaler.tlsDir" -}}/etc/gangscaler/tls{{- end }}

{{/*
Whether a node group (or the provider defaults) uses the kwok backend: every such group needs
the kwok RBAC rules, so rendering refuses it unless kwok.enabled grants them.
*/}}
{{- define "gangscaler.usesKwok" -}}
{{- $uses := false }}
{{- with .Values.config.defaults }}{{- with .backend }}{{- if eq (toString .type) "kwok" }}{{- $uses = true }}{{- end }}{{- end }}{{- end }}
{{- range $id, $group := .Values.nodeGroups }}
{{- with $group.backend }}{{- if eq (toString .type) "kwok" }}{{- $uses = true }}{{- end }}{{- end }}
{{- end }}
{{- if $uses }}true{{- end }}
{{- end }}

{{/*
Refuses value combinations that would deploy something gangscaler refuses or that would run
without the permissions it needs. Included by the Deployment.
*/}}
{{- define "gangscaler.validateValues" -}}
{{- if and (not .Values.tls.enabled) (not .Values.server.allowNonLoopbackPlaintext) }}
{{- fail "gRPC on a pod-reachable address needs mutual TLS (tls.enabled=true); server.allowNonLoopbackPlaintext=true forces plaintext, and anyone who can reach the pod can then resize node groups" }}
{{- end }}
{{- if hasKey .Values.config "server" }}
{{- fail "config.server is set by the chart: use the server.* and tls.* values" }}
{{- end }}
{{- if hasKey .Values.config "nodeGroupsDir" }}
{{- fail "config.nodeGroupsDir is set by the chart: put node groups under nodeGroups" }}
{{- end }}
{{- with .Values.config.kubernetes }}
{{- if and .stateNamespace (ne .stateNamespace $.Release.Namespace) }}
{{- fail (printf "config.kubernetes.stateNamespace must be the release namespace %s: the chart's Role for the state ConfigMap lives there" $.Release.Namespace) }}
{{- end }}
{{- end }}
{{- if and (include "gangscaler.usesKwok" .) (not .Values.kwok.enabled) }}
{{- fail "a node group (or config.defaults) uses the kwok backend: set kwok.enabled=true to grant its permissions (it creates and deletes Node objects)" }}
{{- end }}
{{- if gt (int .Values.replicaCount) 1 }}
{{- if not .Values.leaderElection.enabled }}
{{- fail "replicaCount > 1 needs leaderElection.enabled=true: two active providers would both answer Cluster Autoscaler" }}
{{- end }}
{{- if and .Values.audit.enabled .Values.audit.persistence.enabled (not .Values.audit.persistence.existingClaim) (not (has "ReadWriteMany" .Values.audit.persistence.accessModes)) }}
{{- fail "replicaCount > 1 mounts the audit volume in every replica: audit.persistence.accessModes must include ReadWriteMany" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
provider.yaml: config.* as given, plus what the chart owns: listen addresses, TLS file paths,
the node-group directory, the state namespace, the audit log path (one file per replica,
`<dir>/{identity}.jsonl`, with leader election) and leaderElection (the Lease in the release
namespace; the identity comes from POD_NAME).
*/}}
{{- define "gangscaler.providerConfig" -}}
{{- $c := deepCopy .Values.config }}
{{- $server := dict
  "address" (include "gangscaler.listen" (list .Values.server.bindAddress .Values.server.grpcPort))
  "metricsAddress" (include "gangscaler.listen" (list .Values.server.bindAddress .Values.server.metricsPort)) }}
{{- with .Values.server.connections }}
{{- $_ := set $server "connections" . }}
{{- end }}
{{- if .Values.tls.enabled }}
{{- $dir := include "gangscaler.tlsDir" . }}
{{- $_ := set $server "tls" (dict "certFile" (printf "%s/tls.crt" $dir) "keyFile" (printf "%s/tls.key" $dir) "clientCaFile" (printf "%s/ca.crt" $dir)) }}
{{- else }}
{{- $_ := set $server "plaintext" true }}
{{- $_ := set $server "allowNonLoopbackPlaintext" true }}
{{- end }}
{{- $_ := set $c "server" $server }}
{{- $_ := set $c "nodeGroupsDir" (include "gangscaler.nodeGroupsDir" .) }}
{{- $k := default dict $c.kubernetes }}
{{- $_ := set $k "stateNamespace" .Release.Namespace }}
{{- $_ := set $c "kubernetes" $k }}
{{- if .Values.audit.enabled }}
{{- $a := default dict $c.audit }}
{{- $path := .Values.audit.path }}
{{- if and .Values.leaderElection.enabled (not (contains "{identity}" $path)) }}
{{- $path = printf "%s/{identity}.jsonl" (dir $path) }}
{{- end }}
{{- $_ := set $a "path" $path }}
{{- $_ := set $c "audit" $a }}
{{- else }}
{{- $_ := unset $c "audit" }}
{{- end }}
{{- if .Values.leaderElection.enabled }}
{{- $le := dict "enabled" true "leaseName" .Values.leaderElection.leaseName "namespace" .Release.Namespace }}
{{- range $k := list "leaseDuration" "renewDeadline" "retryPeriod" }}
{{- with (get $.Values.leaderElection $k) }}
{{- $_ := set $le $k . }}
{{- end }}
{{- end }}
{{- $_ := set $c "leaderElection" $le }}
{{- end }}
{{- toYaml $c }}
{{- end }}

{{/* Adds the release's selector to a topology spread constraint that has none. */}}
{{- define "gangscaler.topologySpreadConstraints" -}}
{{- $out := list }}
{{- range .Values.topologySpreadConstraints }}
{{- $c := deepCopy . }}
{{- if not (hasKey $c "labelSelector") }}
{{- $_ := set $c "labelSelector" (dict "matchLabels" (include "gangscaler.selectorLabels" $ | fromYaml)) }}
{{- end }}
{{- $out = append $out $c }}
{{- end }}
{{- toYaml $out }}
{{- end }}

{{/* Cluster Autoscaler's cloud-config for externalgrpc (`address`, and the client certificate over mTLS). */}}
{{- define "gangscaler.cloudConfig" -}}
{{- $dir := .Values.clusterAutoscaler.cloudConfig.clientCertDir -}}
address: "{{ include "gangscaler.serviceHost" . }}:{{ .Values.server.grpcPort }}"
grpc_timeout: {{ .Values.clusterAutoscaler.cloudConfig.grpcTimeout }}
{{- if .Values.tls.enabled }}
cert: {{ $dir }}/tls.crt
key: {{ $dir }}/tls.key
cacert: {{ $dir }}/ca.crt
{{- end }}
{{- end }}

{{/* The webhook's objects (webhook.enabled): their name, and labels that select its pods and
not gangscaler's own (whose Service and PodDisruptionBudget select by name and instance). */}}
{{- define "gangscaler.webhookName" -}}
{{- printf "%s-webhook" (include "gangscaler.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "gangscaler.webhookSelectorLabels" -}}
app.kubernetes.io/name: {{ include "gangscaler.name" . }}-webhook
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "gangscaler.webhookLabels" -}}
helm.sh/chart: {{ include "gangscaler.chart" . }}
{{ include "gangscaler.webhookSelectorLabels" . }}
app.kubernetes.io/component: webhook
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.additionalLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The webhook's serving Secret (tls.crt, tls.key). */}}
{{- define "gangscaler.webhookTlsSecret" -}}
{{- default (printf "%s-tls" (include "gangscaler.webhookName" .)) .Values.webhook.tls.existingSecret }}
{{- end }}

{{/* The pod field that links a pod to its gang natively on the target cluster:
spec.workloadRef on 1.35, spec.schedulingGroup from 1.36 (webhook.nativeLinkField overrides). */}}
{{- define "gangscaler.webhookNativeLinkField" -}}
{{- if .Values.webhook.nativeLinkField }}
{{- .Values.webhook.nativeLinkField }}
{{- else if semverCompare "<1.36-0" .Capabilities.KubeVersion.Version }}
{{- "workloadRef" }}
{{- else }}
{{- "schedulingGroup" }}
{{- end }}
{{- end }}
