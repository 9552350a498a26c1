package bench

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Object is shaped like a Kubernetes object as an operator sees it: type
// and object metadata with labels, annotations, owner references and
// managed fields, a spec with nested slices and maps, and a status. The
// workload decodes it from JSON and deep-copies it on every reconcile, as a
// controller-runtime reconciler does when it reads from the informer cache.
type Object struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Metadata   ObjectMeta `json:"metadata"`
	Spec       Spec       `json:"spec"`
	Status     Status     `json:"status"`
}

// ObjectMeta is the metadata of an Object.
type ObjectMeta struct {
	Name              string            `json:"name"`
	Namespace         string            `json:"namespace"`
	UID               string            `json:"uid"`
	ResourceVersion   string            `json:"resourceVersion"`
	Generation        int64             `json:"generation"`
	CreationTimestamp time.Time         `json:"creationTimestamp"`
	Labels            map[string]string `json:"labels"`
	Annotations       map[string]string `json:"annotations"`
	OwnerReferences   []OwnerReference  `json:"ownerReferences"`
	Finalizers        []string          `json:"finalizers"`
	ManagedFields     []ManagedField    `json:"managedFields"`
}

// OwnerReference points at an owning object.
type OwnerReference struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Name       string `json:"name"`
	UID        string `json:"uid"`
	Controller *bool  `json:"controller,omitempty"`
}

// ManagedField records which manager set which fields.
type ManagedField struct {
	Manager    string    `json:"manager"`
	Operation  string    `json:"operation"`
	APIVersion string    `json:"apiVersion"`
	Time       time.Time `json:"time"`
	Fields     []string  `json:"fields"`
}

// Spec is the desired state: a pod-template-like nesting of slices and
// maps.
type Spec struct {
	Replicas int32             `json:"replicas"`
	Selector map[string]string `json:"selector"`
	Template Template          `json:"template"`
	Volumes  []Volume          `json:"volumes"`
}

// Template is the spec's pod template.
type Template struct {
	Labels     map[string]string `json:"labels"`
	Containers []Container       `json:"containers"`
}

// Container is one container of the template.
type Container struct {
	Name      string    `json:"name"`
	Image     string    `json:"image"`
	Args      []string  `json:"args"`
	Env       []EnvVar  `json:"env"`
	Ports     []Port    `json:"ports"`
	Resources Resources `json:"resources"`
}

// EnvVar is a container's environment variable.
type EnvVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Port is a container port.
type Port struct {
	Name          string `json:"name"`
	ContainerPort int32  `json:"containerPort"`
	Protocol      string `json:"protocol"`
}

// Resources are a container's limits and requests.
type Resources struct {
	Limits   map[string]string `json:"limits"`
	Requests map[string]string `json:"requests"`
}

// Volume is a volume of the template.
type Volume struct {
	Name      string            `json:"name"`
	ConfigMap string            `json:"configMap,omitempty"`
	Items     map[string]string `json:"items,omitempty"`
}

// Status is what the reconciler writes back.
type Status struct {
	ObservedGeneration int64       `json:"observedGeneration"`
	Replicas           int32       `json:"replicas"`
	Conditions         []Condition `json:"conditions"`
}

// Condition is a status condition.
type Condition struct {
	Type               string    `json:"type"`
	Status             string    `json:"status"`
	Reason             string    `json:"reason"`
	Message            string    `json:"message"`
	LastTransitionTime time.Time `json:"lastTransitionTime"`
}

// DeepCopy returns a copy of o that shares no memory with it, written the
// way controller-gen writes them.
func (o *Object) DeepCopy() *Object {
	out := new(Object)
	*out = *o
	o.Metadata.deepCopyInto(&out.Metadata)
	o.Spec.deepCopyInto(&out.Spec)
	out.Status.Conditions = append([]Condition(nil), o.Status.Conditions...)
	return out
}

func (m *ObjectMeta) deepCopyInto(out *ObjectMeta) {
	out.Labels = copyMap(m.Labels)
	out.Annotations = copyMap(m.Annotations)
	if m.OwnerReferences != nil {
		out.OwnerReferences = make([]OwnerReference, len(m.OwnerReferences))
		for i, r := range m.OwnerReferences {
			out.OwnerReferences[i] = r
			if r.Controller != nil {
				c := *r.Controller
				out.OwnerReferences[i].Controller = &c
			}
		}
	}
	out.Finalizers = append([]string(nil), m.Finalizers...)
	if m.ManagedFields != nil {
		out.ManagedFields = make([]ManagedField, len(m.ManagedFields))
		for i, f := range m.ManagedFields {
			out.ManagedFields[i] = f
			out.ManagedFields[i].Fields = append([]string(nil), f.Fields...)
		}
	}
}

func (s *Spec) deepCopyInto(out *Spec) {
	out.Selector = copyMap(s.Selector)
	out.Template.Labels = copyMap(s.Template.Labels)
	if s.Template.Containers != nil {
		out.Template.Containers = make([]Container, len(s.Template.Containers))
		for i, c := range s.Template.Containers {
			oc := &out.Template.Containers[i]
			*oc = c
			oc.Args = append([]string(nil), c.Args...)
			oc.Env = append([]EnvVar(nil), c.Env...)
			oc.Ports = append([]Port(nil), c.Ports...)
			oc.Resources.Limits = copyMap(c.Resources.Limits)
			oc.Resources.Requests = copyMap(c.Resources.Requests)
		}
	}
	if s.Volumes != nil {
		out.Volumes = make([]Volume, len(s.Volumes))
		for i, v := range s.Volumes {
			out.Volumes[i] = v
			out.Volumes[i].Items = copyMap(v.Items)
		}
	}
}

func copyMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// Fixture shape: what an object of a busy operator carries.
const (
	fixtureLabels      = 50
	fixtureAnnotations = 50
	fixtureVariants    = 16 // distinct encoded objects the workload cycles through
)

// fixtureEpoch makes timestamps deterministic.
var fixtureEpoch = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// newFixture builds object number i deterministically: the same i always
// yields the same object and the same JSON, about 12 KB of it.
func newFixture(i int) *Object {
	ctl := true
	o := &Object{
		APIVersion: "apps.example.com/v1",
		Kind:       "Workload",
		Metadata: ObjectMeta{
			Name:              fmt.Sprintf("workload-%04d", i),
			Namespace:         fmt.Sprintf("team-%02d", i%7),
			UID:               fmt.Sprintf("6f1c%04x-0b7e-4c2a-9d5e-%012x", i, 0x5eed0000+i),
			ResourceVersion:   fmt.Sprint(1_000_000 + 37*i),
			Generation:        int64(3 + i%5),
			CreationTimestamp: fixtureEpoch.Add(time.Duration(i) * time.Minute),
			Labels:            make(map[string]string, fixtureLabels),
			Annotations:       make(map[string]string, fixtureAnnotations),
			OwnerReferences: []OwnerReference{{
				APIVersion: "apps.example.com/v1", Kind: "WorkloadSet",
				Name: fmt.Sprintf("set-%02d", i%11), UID: fmt.Sprintf("0a0b%04x-1111-2222-3333-%012x", i%11, i%11), Controller: &ctl,
			}},
			Finalizers: []string{"apps.example.com/cleanup", "apps.example.com/protect"},
		},
		Spec: Spec{
			Replicas: int32(1 + i%5),
			Selector: map[string]string{"app.kubernetes.io/name": "workload", "app.kubernetes.io/instance": fmt.Sprintf("workload-%04d", i)},
			Template: Template{Labels: map[string]string{"app.kubernetes.io/name": "workload", "tier": "backend"}},
		},
		Status: Status{ObservedGeneration: int64(2 + i%5), Replicas: int32(i % 5)},
	}
	m := &o.Metadata
	for j := range fixtureLabels {
		m.Labels[fmt.Sprintf("example.com/label-%02d", j)] = fmt.Sprintf("value-%02d-%04d", j, (i*31+j)%10000)
	}
	for j := range fixtureAnnotations {
		m.Annotations[fmt.Sprintf("annotations.example.com/key-%02d", j)] =
			fmt.Sprintf("annotation %02d of workload %04d: %s", j, i, strings.Repeat("ab", 20+(i+j)%9))
	}
	for j := range 3 {
		m.ManagedFields = append(m.ManagedFields, ManagedField{
			Manager: fmt.Sprintf("manager-%d", j), Operation: "Update", APIVersion: "apps.example.com/v1",
			Time:   fixtureEpoch.Add(time.Duration(i+j) * time.Second),
			Fields: []string{"f:metadata", "f:labels", "f:spec", "f:template", "f:containers"},
		})
	}
	for c := range 3 {
		ct := Container{
			Name:  fmt.Sprintf("container-%d", c),
			Image: fmt.Sprintf("registry.example.com/team/image-%d:v1.%d.%d", c, i%10, c),
			Args:  []string{"--log-level=info", "--metrics-bind-address=:8080", fmt.Sprintf("--shard=%d", i%4)},
			Ports: []Port{{Name: "http", ContainerPort: 8080, Protocol: "TCP"}, {Name: "metrics", ContainerPort: 9090, Protocol: "TCP"}},
			Resources: Resources{
				Limits:   map[string]string{"cpu": "500m", "memory": "256Mi"},
				Requests: map[string]string{"cpu": "100m", "memory": "128Mi"},
			},
		}
		for e := range 8 {
			ct.Env = append(ct.Env, EnvVar{Name: fmt.Sprintf("ENV_VAR_%d_%d", c, e), Value: fmt.Sprintf("value-%d-%d-%d", i, c, e)})
		}
		o.Spec.Template.Containers = append(o.Spec.Template.Containers, ct)
	}
	for v := range 4 {
		o.Spec.Volumes = append(o.Spec.Volumes, Volume{
			Name: fmt.Sprintf("config-%d", v), ConfigMap: fmt.Sprintf("workload-config-%d", v),
			Items: map[string]string{"config.yaml": "config.yaml", "extra.yaml": fmt.Sprintf("extra-%d.yaml", v)},
		})
	}
	for c, t := range []string{"Available", "Progressing", "Degraded"} {
		o.Status.Conditions = append(o.Status.Conditions, Condition{
			Type: t, Status: "True", Reason: "Reconciled", Message: fmt.Sprintf("%s since generation %d", t, 2+i%5),
			LastTransitionTime: fixtureEpoch.Add(time.Duration(i+c) * time.Hour),
		})
	}
	return o
}

// fixtures returns the encoded fixture variants the workload decodes.
func fixtures() [][]byte {
	out := make([][]byte, fixtureVariants)
	for i := range out {
		b, err := json.Marshal(newFixture(i))
		if err != nil {
			panic(err) // cannot happen: the types marshal
		}
		out[i] = b
	}
	return out
}
