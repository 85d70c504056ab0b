{{/* Chart name, overridable. */}}
{{- define "hubfed.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Prefix of every object name: the release name, plus the chart name unless included. */}}
{{- define "hubfed.fullname" -}}
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

{{- define "hubfed.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "hubfed.labels" -}}
helm.sh/chart: {{ include "hubfed.chart" . }}
{{ include "hubfed.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: hubfed
{{- end }}

{{/* Labels that select the controller pods. */}}
{{- define "hubfed.selectorLabels" -}}
app.kubernetes.io/name: {{ include "hubfed.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller
{{- end }}

{{- define "hubfed.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "hubfed.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "hubfed.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* Whether the control plane is namespace-scoped (KubeFedConfig spec.scope). */}}
{{- define "hubfed.namespaced" -}}
{{- if eq .Values.kubefedConfig.scope "Namespaced" }}true{{ end }}
{{- end }}

{{- define "hubfed.webhookServiceName" -}}
{{- printf "%s-webhook" (include "hubfed.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "hubfed.webhookSecretName" -}}
{{- printf "%s-webhook-tls" (include "hubfed.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
KubeFed's webhook configuration names; a namespaced control plane suffixes them with its
namespace so that several can share a hub.
*/}}
{{- define "hubfed.webhookConfigSuffix" -}}
{{- if include "hubfed.namespaced" . }}{{ printf "-%s" .Release.Namespace }}{{ end }}
{{- end }}

{{/*
The webhook CA and serving certificate, generated once per render and shared by the
templates that need them (the Secret, the caBundles, the pods' checksum annotation). An
existing Secret is reused so that upgrades keep the certificates. Returns YAML with the
base64 fields caCert, tlsCert, tlsKey.
*/}}
{{- define "hubfed.webhookCerts" -}}
{{- $cache := .Values._hubfedWebhookCerts | default dict }}
{{- if not $cache.tlsCert }}
{{- $secretName := include "hubfed.webhookSecretName" . }}
{{- $existing := lookup "v1" "Secret" .Release.Namespace $secretName }}
{{- if and $existing $existing.data (index $existing.data "ca.crt") (index $existing.data "tls.crt") (index $existing.data "tls.key") }}
{{- $_ := set $cache "caCert" (index $existing.data "ca.crt") }}
{{- $_ := set $cache "tlsCert" (index $existing.data "tls.crt") }}
{{- $_ := set $cache "tlsKey" (index $existing.data "tls.key") }}
{{- else }}
{{- $service := include "hubfed.webhookServiceName" . }}
{{- $ns := .Release.Namespace }}
{{- $days := int .Values.webhook.certificate.validityDays }}
{{- $ca := genCA (printf "%s-ca" $service) $days }}
{{- $dns := list $service (printf "%s.%s" $service $ns) (printf "%s.%s.svc" $service $ns) (printf "%s.%s.svc.cluster.local" $service $ns) }}
{{- $cert := genSignedCert (printf "%s.%s.svc" $service $ns) nil $dns $days $ca }}
{{- $_ := set $cache "caCert" ($ca.Cert | b64enc) }}
{{- $_ := set $cache "tlsCert" ($cert.Cert | b64enc) }}
{{- $_ := set $cache "tlsKey" ($cert.Key | b64enc) }}
{{- end }}
{{- $_ := set .Values "_hubfedWebhookCerts" $cache }}
{{- end }}
{{- toYaml $cache }}
{{- end }}

{{/* clientConfig of a webhook; takes (list $ path). */}}
{{- define "hubfed.webhookClientConfig" -}}
{{- $ := index . 0 }}
{{- $path := index . 1 -}}
clientConfig:
  service:
    name: {{ include "hubfed.webhookServiceName" $ }}
    namespace: {{ $.Release.Namespace }}
    path: {{ $path }}
    port: 443
  {{- if not $.Values.webhook.certManager.enabled }}
  caBundle: {{ (include "hubfed.webhookCerts" $ | fromYaml).caCert }}
  {{- end }}
{{- end }}

{{/* Fields every webhook shares. */}}
{{- define "hubfed.webhookCommon" -}}
admissionReviewVersions: ["v1"]
sideEffects: None
timeoutSeconds: {{ .Values.webhook.timeoutSeconds }}
{{- if include "hubfed.namespaced" . }}
namespaceSelector:
  matchLabels:
    kubernetes.io/metadata.name: {{ .Release.Namespace }}
{{- end }}
{{- end }}

{{/*
RBAC rules on federated objects, their PropagatedVersions and events: in the ClusterRole for a
cluster-scoped control plane, in the Role for a namespaced one.
*/}}
{{- define "hubfed.federatedObjectRules" -}}
# Federated objects: read, add/remove the finalizer, write status. Never create or delete:
# users own them.
- apiGroups:
    {{- toYaml .Values.federatedAPIGroups | nindent 4 }}
  resources: ["*"]
  verbs: ["get", "list", "watch", "update", "patch"]
# What was last written to each cluster (KubeFed's names and hashes).
- apiGroups: ["core.kubefed.io"]
  resources:
    - propagatedversions
    - propagatedversions/status
    - propagatedversions/finalizers
  verbs: ["get", "list", "watch", "create", "update", "patch"]
# ReplicaSchedulingPreferences: read only (the scheduler writes the federated object's
# placement and replica overrides).
- apiGroups: ["scheduling.kubefed.io"]
  resources: ["replicaschedulingpreferences"]
  verbs: ["get", "list", "watch"]
# PlacementPolicies: read, and write their status (the choice and why).
- apiGroups: ["scheduling.hubfed.io"]
  resources: ["placementpolicies"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["scheduling.hubfed.io"]
  resources: ["placementpolicies/status"]
  verbs: ["get", "patch", "update"]
# Multi-cluster DNS: ServiceDNSRecords and IngressDNSRecords read, their status written;
# their DNSEndpoints (external-dns's group and KubeFed's) written and deleted.
- apiGroups: ["multiclusterdns.kubefed.io"]
  resources: ["servicednsrecords", "ingressdnsrecords"]
  verbs: ["get", "list", "watch"]
- apiGroups: ["multiclusterdns.kubefed.io"]
  resources: ["servicednsrecords/status", "ingressdnsrecords/status"]
  verbs: ["get", "patch", "update"]
- apiGroups: ["multiclusterdns.kubefed.io", "externaldns.k8s.io"]
  resources: ["dnsendpoints"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
# Events on federated objects, ReplicaSchedulingPreferences, KubeFedClusters and DNS records.
- apiGroups: ["", "events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- end }}
