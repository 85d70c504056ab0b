{{/* Chart name, overridable. */}}
{{- define "hubfed-agent.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Prefix of every object name: the release name, plus the chart name unless included. */}}
{{- define "hubfed-agent.fullname" -}}
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

{{- define "hubfed-agent.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "hubfed-agent.labels" -}}
helm.sh/chart: {{ include "hubfed-agent.chart" . }}
{{ include "hubfed-agent.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: hubfed
{{- end }}

{{/* Labels that select the agent pod. */}}
{{- define "hubfed-agent.selectorLabels" -}}
app.kubernetes.io/name: {{ include "hubfed-agent.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: agent
{{- end }}

{{/* The agent's ServiceAccount: join's `hubfed-agent` unless renamed. */}}
{{- define "hubfed-agent.serviceAccountName" -}}
{{- required "serviceAccount.name is required (join's ServiceAccount is hubfed-agent)" .Values.serviceAccount.name }}
{{- end }}

{{- define "hubfed-agent.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
Member RBAC names, as `hubfedctl join` names them (kubefedctl's names, crates/hubfedctl's
rbac.rs JoinNames): the object rights `kubefed-controller-manager:<sa>`, and for a namespaced
control plane the health rights `kubefed-controller-manager:<namespace>:healthcheck-<sa>`.
*/}}
{{- define "hubfed-agent.roleName" -}}
{{- printf "kubefed-controller-manager:%s" (include "hubfed-agent.serviceAccountName" .) }}
{{- end }}

{{- define "hubfed-agent.healthRoleName" -}}
{{- printf "kubefed-controller-manager:%s:healthcheck-%s" .Release.Namespace (include "hubfed-agent.serviceAccountName" .) }}
{{- end }}

{{/*
Object rules for a list of target types ({group, pluralName, scope}), exactly as join's
type_rules: one rule per API group (groups and resources sorted, duplicates dropped) with
every verb the agent uses; `bind` and `escalate` on federated roles and clusterroles (the API
server refuses to create a role granting rights its writer lacks); `get`/`list` on pods when
deployments or replicasets are federated and pods are not (the RSP scheduler counts them).
Returns a YAML list, or nothing for no types.
*/}}
{{- define "hubfed-agent.typeRules" -}}
{{- $byGroup := dict }}
{{- range . }}
{{- $group := default "" .group }}
{{- $plural := required "rbac.federatedTypes: every type needs pluralName" .pluralName }}
{{- $_ := set $byGroup $group (append (get $byGroup $group | default list) $plural) }}
{{- end }}
{{- range $group := keys $byGroup | sortAlpha }}
{{- $resources := get $byGroup $group | uniq | sortAlpha }}
- apiGroups: [{{ $group | quote }}]
  resources: {{ toJson $resources }}
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
{{- if eq $group "rbac.authorization.k8s.io" }}
{{- $roles := list }}
{{- range $resources }}
{{- if or (eq . "roles") (eq . "clusterroles") }}
{{- $roles = append $roles . }}
{{- end }}
{{- end }}
{{- if $roles }}
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: {{ toJson $roles }}
  verbs: ["bind", "escalate"]
{{- end }}
{{- end }}
{{- end }}
{{- $apps := get $byGroup "apps" | default list }}
{{- $core := get $byGroup "" | default list }}
{{- if and (or (has "deployments" $apps) (has "replicasets" $apps)) (not (has "pods" $core)) }}
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list"]
{{- end }}
{{- end }}
