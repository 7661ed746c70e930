package deploy_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/crosstalk-project/crosstalk/internal/agent"
	"github.com/crosstalk-project/crosstalk/internal/nodesignal"
)

// objects are decoded manifests by kind/name.
type objects map[string]any

// decodeStrict decodes one manifest into its Kubernetes API type, failing on
// unknown or duplicated fields (what `kubectl apply --validate=strict`
// rejects), and on kinds the deployment is not meant to contain.
func decodeStrict(doc string) (key string, obj any, err error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
		return "", nil, err
	}
	switch tm.APIVersion + "/" + tm.Kind {
	case "v1/Namespace":
		obj = &corev1.Namespace{}
	case "v1/ServiceAccount":
		obj = &corev1.ServiceAccount{}
	case "v1/ConfigMap":
		obj = &corev1.ConfigMap{}
	case "apps/v1/DaemonSet":
		obj = &appsv1.DaemonSet{}
	case "rbac.authorization.k8s.io/v1/ClusterRole":
		obj = &rbacv1.ClusterRole{}
	case "rbac.authorization.k8s.io/v1/ClusterRoleBinding":
		obj = &rbacv1.ClusterRoleBinding{}
	case "networking.k8s.io/v1/NetworkPolicy":
		obj = &networkingv1.NetworkPolicy{}
	case "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy":
		obj = &admissionv1.ValidatingAdmissionPolicy{}
	case "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicyBinding":
		obj = &admissionv1.ValidatingAdmissionPolicyBinding{}
	case "monitoring.coreos.com/v1/PodMonitor", "monitoring.coreos.com/v1/PrometheusRule":
		// Prometheus Operator CRDs: not in k8s.io/api; checked by shape below.
		var m map[string]any
		if err := yaml.UnmarshalStrict([]byte(doc), &m); err != nil {
			return "", nil, err
		}
		obj = m
	default:
		return "", nil, fmt.Errorf("unexpected kind %s/%s", tm.APIVersion, tm.Kind)
	}
	if _, ok := obj.(map[string]any); !ok {
		// As the API server decodes: YAML to JSON (duplicate keys are an
		// error), then case-sensitive JSON with unknown and duplicate
		// fields rejected (encoding/json alone would take hostPid for hostPID).
		j, err := yaml.YAMLToJSONStrict([]byte(doc))
		if err != nil {
			return "", nil, fmt.Errorf("%s: %w", tm.Kind, err)
		}
		strict, err := kjson.UnmarshalStrict(j, obj, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
		if err == nil && len(strict) > 0 {
			err = errors.Join(strict...)
		}
		if err != nil {
			return "", nil, fmt.Errorf("%s: %w", tm.Kind, err)
		}
	}
	var om struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
	}
	yaml.Unmarshal([]byte(doc), &om)
	if om.Metadata.Name == "" {
		return "", nil, fmt.Errorf("%s without a name", tm.Kind)
	}
	return tm.Kind + "/" + om.Metadata.Name, obj, nil
}

func decodeAll(t *testing.T, docs map[string]string) objects {
	t.Helper()
	out := objects{}
	for file, text := range docs {
		if file == "NOTES.txt" {
			continue // shown to the user by helm, not applied
		}
		for _, d := range documents(text) {
			key, obj, err := decodeStrict(d)
			if err != nil {
				t.Errorf("%s: %v", file, err)
				continue
			}
			if _, dup := out[key]; dup {
				t.Errorf("%s: %s defined twice", file, key)
			}
			out[key] = obj
		}
	}
	return out
}

func manifests(t *testing.T) objects {
	t.Helper()
	files, _ := filepath.Glob("kubernetes/*.yaml")
	docs := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs[f] = string(b)
	}
	return decodeAll(t, docs)
}

// The strict decoding can fail: a misspelt field is an error.
func TestStrictDecodingCatchesTypos(t *testing.T) {
	for _, doc := range []string{
		"apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: x}\nspec:\n  template:\n    spec:\n      hostPid: true\n",
		"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\nmetadata: {name: y}\n",
		"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\n",
	} {
		if _, _, err := decodeStrict(doc); err == nil {
			t.Errorf("accepted:\n%s", doc)
		}
	}
}

// checkAgentDeployment holds for the plain manifests and the rendered chart:
// the agent runs with --root /host over the node's filesystems, with host
// PID, the unit's capabilities, the state directory on the node, a valid
// configuration, the node name from the downward API, and RBAC for exactly
// what the node signal does.
func checkAgentDeployment(t *testing.T, objs objects, name, namespace string) {
	t.Helper()
	ds, ok := objs["DaemonSet/"+name].(*appsv1.DaemonSet)
	if !ok {
		t.Fatalf("no DaemonSet/%s in %v", name, slices.Sorted(mapsKeys(objs)))
	}
	pod := ds.Spec.Template.Spec
	if !pod.HostPID {
		t.Error("hostPID: the agent reads the tenants' threads and init's mount table")
	}
	if pod.HostNetwork {
		t.Error("hostNetwork: the metrics listener must stay in the pod's network namespace")
	}
	if ds.Namespace != namespace || pod.ServiceAccountName != name {
		t.Errorf("namespace %q service account %q", ds.Namespace, pod.ServiceAccountName)
	}
	if !reflect.DeepEqual(ds.Spec.Selector.MatchLabels, filterLabels(ds.Spec.Template.Labels, ds.Spec.Selector.MatchLabels)) {
		t.Errorf("selector %v does not match the pod labels %v", ds.Spec.Selector.MatchLabels, ds.Spec.Template.Labels)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Containers))
	}
	c := pod.Containers[0]
	if !slices.Contains(c.Args, "--root=/host") || c.Args[0] != "run" {
		t.Errorf("args %v: want run --root=/host", c.Args)
	}
	if len(c.Env) == 0 || c.Env[0].Name != "NODE_NAME" || c.Env[0].ValueFrom == nil || c.Env[0].ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Errorf("NODE_NAME from the downward API: %+v", c.Env)
	}
	if _, hasCPULimit := c.Resources.Limits[corev1.ResourceCPU]; hasCPULimit {
		t.Error("a CPU limit would distort the agent's probes")
	}
	sc := c.SecurityContext
	if sc == nil || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Fatalf("securityContext %+v: drop ALL", sc)
	}
	var add []string
	for _, cp := range sc.Capabilities.Add {
		add = append(add, "CAP_"+string(cp))
	}
	if !slices.Equal(add, unitCaps) {
		t.Errorf("capabilities %v, want the systemd unit's %v", add, unitCaps)
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m
	}
	hostPaths := map[string]string{}
	for _, v := range pod.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	// The host layer opens /host/proc, /host/sys (with cgroupfs and resctrl
	// below it), /host/dev/cpu and /host/run/libvirt.
	for mount, hostPath := range map[string]string{"/host/proc": "/proc", "/host/sys": "/sys", "/host/dev": "/dev", "/host/run/libvirt": "/run/libvirt", "/var/lib/crosstalk": "/var/lib/crosstalk"} {
		m, ok := mounts[mount]
		if !ok || hostPaths[m.Name] != hostPath {
			t.Errorf("%s: want hostPath %s mounted there (have %+v)", mount, hostPath, m)
		}
	}
	if m := mounts["/host/sys"]; m.ReadOnly || m.MountPropagation == nil || *m.MountPropagation != corev1.MountPropagationHostToContainer {
		t.Errorf("/host/sys must be writable (cgroupfs, resctrl, cpufreq) and see later mounts: %+v", m)
	}
	if ds.Spec.Template.Spec.TerminationGracePeriodSeconds == nil || *ds.Spec.Template.Spec.TerminationGracePeriodSeconds < 10 {
		t.Error("terminationGracePeriodSeconds: give the agent time to restore on SIGTERM")
	}

	// The configuration it mounts is a valid agent configuration with the
	// node signal on, listening for Prometheus, keeping state on the node.
	cm, ok := objs["ConfigMap/"+name].(*corev1.ConfigMap)
	if !ok {
		t.Fatal("no ConfigMap")
	}
	cfg, err := agent.ParseConfig([]byte(cm.Data["crosstalk.yaml"]), "configmap")
	if err != nil {
		t.Fatalf("configmap: %v", err)
	}
	if !cfg.Kubernetes.NodeSignal || cfg.StateDir != mounts["/var/lib/crosstalk"].MountPath || !strings.HasSuffix(cfg.Listen, fmt.Sprintf(":%d", c.Ports[0].ContainerPort)) {
		t.Errorf("config %+v does not match the pod (state mount, metrics port %d)", cfg, c.Ports[0].ContainerPort)
	}

	// RBAC: get+patch nodes, patch nodes/status, for this service account, nothing else.
	role, ok := objs["ClusterRole/"+name+"-node-signal"].(*rbacv1.ClusterRole)
	if !ok {
		t.Fatal("no ClusterRole")
	}
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"nodes/status"}, Verbs: []string{"patch"}},
	}
	if !reflect.DeepEqual(role.Rules, want) {
		t.Errorf("ClusterRole rules %+v, want %+v", role.Rules, want)
	}
	rb, ok := objs["ClusterRoleBinding/"+name+"-node-signal"].(*rbacv1.ClusterRoleBinding)
	if !ok || rb.RoleRef.Name != role.Name || len(rb.Subjects) != 1 || rb.Subjects[0].Name != name || rb.Subjects[0].Namespace != namespace {
		t.Errorf("ClusterRoleBinding %+v", rb)
	}
	// The label the node signal publishes is the one the docs tell schedulers to use.
	if nodesignal.Label != "crosstalk.io/uncontained-polluter" {
		t.Errorf("label %s", nodesignal.Label)
	}
}

func mapsKeys(o objects) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range o {
			if !yield(k) {
				return
			}
		}
	}
}

func filterLabels(have, want map[string]string) map[string]string {
	out := map[string]string{}
	for k := range want {
		if v, ok := have[k]; ok {
			out[k] = v
		}
	}
	return out
}

func TestKubernetesManifests(t *testing.T) {
	objs := manifests(t)
	checkAgentDeployment(t, objs, "crosstalk", "crosstalk")
	vap, ok := objs["ValidatingAdmissionPolicy/crosstalk-own-node-only"].(*admissionv1.ValidatingAdmissionPolicy)
	if !ok || !strings.Contains(vap.Spec.MatchConditions[0].Expression, "system:serviceaccount:crosstalk:crosstalk") {
		t.Errorf("node restriction policy: %+v", vap)
	}
	ns, ok := objs["Namespace/crosstalk"].(*corev1.Namespace)
	if !ok || ns.Labels["pod-security.kubernetes.io/enforce"] != "privileged" {
		t.Errorf("namespace: %+v", ns)
	}
}

// The chart with default values renders the same pod as the plain
// manifests (the two cannot drift), and with every option on it still
// renders valid objects.
func TestHelmChart(t *testing.T) {
	docs, err := renderChart("helm/crosstalk", "crosstalk", "crosstalk", nil)
	if err != nil {
		t.Fatal(err)
	}
	objs := decodeAll(t, docs)
	checkAgentDeployment(t, objs, "crosstalk", "crosstalk")
	chartPod := objs["DaemonSet/crosstalk"].(*appsv1.DaemonSet).Spec.Template.Spec
	plainPod := manifests(t)["DaemonSet/crosstalk"].(*appsv1.DaemonSet).Spec.Template.Spec
	if !reflect.DeepEqual(chartPod, plainPod) {
		a, _ := json.MarshalIndent(chartPod, "", " ")
		b, _ := json.MarshalIndent(plainPod, "", " ")
		t.Errorf("the chart's pod differs from deploy/kubernetes/daemonset.yaml:\nchart: %s\nplain: %s", a, b)
	}
	for _, k := range []string{"PodMonitor/crosstalk", "PrometheusRule/crosstalk", "ValidatingAdmissionPolicy/crosstalk-own-node-only"} {
		if _, ok := objs[k]; ok {
			t.Errorf("%s rendered though disabled by default", k)
		}
	}
	if !strings.Contains(docs["NOTES.txt"], "DoesNotExist") {
		t.Errorf("NOTES.txt: %s", docs["NOTES.txt"])
	}

	// Every option on, another release name and namespace.
	docs, err = renderChart("helm/crosstalk", "ct", "ops", map[string]any{
		"image":                 map[string]any{"repository": "registry.example/crosstalk", "tag": "0.1.0-rc1"},
		"privileged":            true,
		"nodeSignal":            map[string]any{"taint": "PreferNoSchedule"},
		"config":                map[string]any{"dry_run": true, "protect": []any{"db-*"}, "listen": "127.0.0.1:1"},
		"metrics":               map[string]any{"podMonitor": map[string]any{"enabled": true, "labels": map[string]any{"release": "prom"}}, "prometheusRule": map[string]any{"enabled": true}},
		"nodeRestrictionPolicy": map[string]any{"enabled": true},
		"nodeSelector":          map[string]any{"crosstalk.io/enabled": "true"},
	})
	if err != nil {
		t.Fatal(err)
	}
	objs = decodeAll(t, docs)
	checkAgentDeployment(t, objs, "ct-crosstalk", "ops")
	ds := objs["DaemonSet/ct-crosstalk"].(*appsv1.DaemonSet)
	c := ds.Spec.Template.Spec.Containers[0]
	if c.Image != "registry.example/crosstalk:0.1.0-rc1" || !*c.SecurityContext.Privileged || ds.Spec.Template.Spec.NodeSelector["crosstalk.io/enabled"] != "true" {
		t.Errorf("overrides not applied: image %s privileged %v", c.Image, *c.SecurityContext.Privileged)
	}
	cfg, err := agent.ParseConfig([]byte(objs["ConfigMap/ct-crosstalk"].(*corev1.ConfigMap).Data["crosstalk.yaml"]), "chart")
	if err != nil || !cfg.DryRun || cfg.Kubernetes.Taint != "PreferNoSchedule" || cfg.Protect[0] != "db-*" || cfg.Listen != "0.0.0.0:9477" {
		t.Errorf("config from values: %+v, %v (listen is the chart's, not overridable)", cfg, err)
	}
	vap := objs["ValidatingAdmissionPolicy/ct-crosstalk-own-node-only"].(*admissionv1.ValidatingAdmissionPolicy)
	if !strings.Contains(vap.Spec.MatchConditions[0].Expression, "system:serviceaccount:ops:ct-crosstalk") {
		t.Errorf("policy names the wrong service account: %s", vap.Spec.MatchConditions[0].Expression)
	}
	pm, _ := objs["PodMonitor/ct-crosstalk"].(map[string]any)
	if pm == nil || pm["metadata"].(map[string]any)["labels"].(map[string]any)["release"] != "prom" {
		t.Errorf("PodMonitor: %v", pm)
	}
	// The PrometheusRule carries exactly the rules in monitoring/.
	pr, _ := objs["PrometheusRule/ct-crosstalk"].(map[string]any)
	b, _ := os.ReadFile("../monitoring/prometheus/crosstalk-rules.yml")
	var rules map[string]any
	yaml.Unmarshal(b, &rules)
	if pr == nil || !reflect.DeepEqual(pr["spec"], rules) {
		t.Errorf("PrometheusRule spec differs from monitoring/prometheus/crosstalk-rules.yml")
	}

	// A required value missing is an error, as with helm.
	if _, err := renderChart("helm/crosstalk", "ct", "ops", map[string]any{"image": map[string]any{"repository": ""}}); err == nil || !strings.Contains(err.Error(), "image.repository is required") {
		t.Errorf("missing image.repository: %v", err)
	}
}

// The chart ships a copy of the rules (Helm cannot read files outside the
// chart): it must stay identical.
func TestChartRulesAreTheMonitoringRules(t *testing.T) {
	a, _ := os.ReadFile("helm/crosstalk/files/crosstalk-rules.yml")
	b, _ := os.ReadFile("../monitoring/prometheus/crosstalk-rules.yml")
	if len(a) == 0 || string(a) != string(b) {
		t.Error("deploy/helm/crosstalk/files/crosstalk-rules.yml differs from monitoring/prometheus/crosstalk-rules.yml: copy it")
	}
}
